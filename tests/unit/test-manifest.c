/* SPDX-License-Identifier: MIT */
/* MANIFEST.json: round trip, checksum, missing/duplicate ranks, field errors. */
#include <errno.h>
#include <stdint.h>

#include <jansson.h>

#include "check.h"
#include "sample.h"

static char err[512];

/* Re-seal edited JSON with a correct checksum, as a careless editor would. */
static char *reseal(json_t *root)
{
	char sum[32], *s;

	json_object_del(root, "checksum");
	s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	snprintf(sum, sizeof(sum), "crc32c:%08x", ckpt_crc32c(0, s, strlen(s)));
	free(s);
	json_object_set_new(root, "checksum", json_string(sum));
	return json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
}

/* Load text, apply edit (a jansson path tweak), reseal, decode. */
static int decode_edited(const char *text, void (*edit)(json_t *), const char *want_in_err)
{
	struct ckpt_manifest m;
	json_t *root = json_loads(text, 0, NULL);
	char *s;
	int ret;

	edit(root);
	s = reseal(root);
	json_decref(root);
	ret = ckpt_manifest_decode(s, strlen(s), &m, err, sizeof(err));
	free(s);
	if (ret == 0)
		ckpt_manifest_free(&m);
	if (ret < 0 && want_in_err && !strstr(err, want_in_err)) {
		fprintf(stderr, "error \"%s\" does not mention \"%s\"\n", err, want_in_err);
		check_failures++;
	}
	return ret;
}

static json_t *rank_at(json_t *root, size_t i) { return json_array_get(json_object_get(root, "ranks"), i); }
static json_t *tensor_at(json_t *root, size_t r, size_t t)
{
	return json_array_get(json_object_get(rank_at(root, r), "tensors"), t);
}

static void e_none(json_t *r) { (void)r; }
static void e_drop_rank(json_t *r) { json_array_remove(json_object_get(r, "ranks"), 1); }
static void e_dup_rank(json_t *r)
{
	json_object_set_new(rank_at(r, 2), "rank", json_integer(1));
	json_object_set_new(rank_at(r, 2), "shard", json_string("rank-000001.shard"));
	json_object_set_new(rank_at(r, 2), "index", json_string("rank-000001.index"));
}
static void e_swap_ranks(json_t *r)
{
	json_t *a = json_object_get(r, "ranks"), *x = json_incref(json_array_get(a, 0));
	json_array_remove(a, 0);
	json_array_append_new(a, x);
}
static void e_version(json_t *r) { json_object_set_new(r, "version", json_integer(2)); }
static void e_format(json_t *r) { json_object_set_new(r, "format", json_string("other")); }
static void e_world(json_t *r) { json_object_set_new(r, "world_size", json_integer(5)); }
static void e_neg_step(json_t *r) { json_object_set_new(r, "step", json_integer(-1)); }
static void e_str_step(json_t *r) { json_object_set_new(r, "step", json_string("5")); }
static void e_real_step(json_t *r) { json_object_set_new(r, "step", json_real(5.0)); }
/* Past ten digits: no step directory can be named for it. */
static void e_big_step(json_t *r) { json_object_set_new(r, "step", json_integer(10000000000LL)); }
static void e_job(json_t *r) { json_object_set_new(r, "job", json_string("../x")); }
static void e_no_job(json_t *r) { json_object_del(r, "job"); }
static void e_chunk(json_t *r) { json_object_set_new(r, "chunk_bytes", json_integer(100)); }
static void e_shard_name(json_t *r) { json_object_set_new(rank_at(r, 3), "shard", json_string("../../etc/passwd")); }
static void e_sha(json_t *r) { json_object_set_new(rank_at(r, 0), "index_sha256", json_string("abc")); }
static void e_shape(json_t *r)
{
	json_array_set_new(json_object_get(tensor_at(r, 3, 0), "shape"), 0, json_integer(1001));
}
static void e_dtype(json_t *r) { json_object_set_new(tensor_at(r, 1, 1), "dtype", json_string("f128")); }
static void e_tname(json_t *r) { json_object_set_new(tensor_at(r, 1, 2), "name", json_string("a/b")); }
static void e_overlap(json_t *r) { json_object_set_new(tensor_at(r, 2, 1), "data_offset", json_integer(0)); }
static void e_dup_name(json_t *r)
{
	json_object_set_new(tensor_at(r, 2, 1), "name", json_string("model.layer0.w"));
}
static void e_outside(json_t *r) { json_object_set_new(rank_at(r, 2), "shard_bytes", json_integer(4096)); }
static void e_crc_range(json_t *r) { json_object_set_new(tensor_at(r, 0, 0), "crc32c", json_integer(1ll << 32)); }
static void e_ndim(json_t *r) { json_array_append_new(json_object_get(tensor_at(r, 0, 0), "offset"), json_integer(0)); }
static void e_tensors_type(json_t *r) { json_object_set_new(rank_at(r, 0), "tensors", json_object()); }
static void e_extra_key(json_t *r) { json_object_set_new(r, "comment", json_string("hello")); }

int main(void)
{
	struct ckpt_manifest m, out;
	char *text = NULL, *edited;
	size_t len = 0;

	CHECK_EQ(sample_manifest(&m, 4), 0);
	CHECK_EQ(ckpt_manifest_encode(&m, &text, &len), 0);
	if (!text)
		return 1;
	CHECK_EQ(len, strlen(text));
	CHECK(text[len - 1] == '\n');
	CHECK(strstr(text, "\"format\": \"ckpt-manifest\"") != NULL);
	CHECK(strstr(text, "\"created\": \"2023-11-14T22:13:20.123456789Z\"") != NULL);
	CHECK(strstr(text, "\"shard\": \"rank-000003.shard\"") != NULL);
	CHECK(strstr(text, "\"dtype\": \"bf16\"") != NULL);
	CHECK(strstr(text, "\"checksum\": \"crc32c:") != NULL);

	CHECK_EQ(ckpt_manifest_decode(text, len, &out, err, sizeof(err)), 0);
	CHECK(strcmp(out.job, "llama-7b") == 0);
	CHECK_EQ(out.step, 1200);
	CHECK_EQ(out.world_size, 4);
	CHECK_EQ(out.chunk_bytes, 4 << 20);
	CHECK_EQ(out.created_unix_ns, m.created_unix_ns);
	for (uint32_t r = 0; r < 4; r++) {
		CHECK_EQ(out.ranks[r].rank, r);
		CHECK_EQ(out.ranks[r].shard_bytes, m.ranks[r].shard_bytes);
		CHECK_EQ(out.ranks[r].blob_bytes, m.ranks[r].blob_bytes);
		CHECK_EQ(out.ranks[r].blob_crc32c, m.ranks[r].blob_crc32c);
		CHECK_EQ(out.ranks[r].index_bytes, m.ranks[r].index_bytes);
		CHECK(memcmp(out.ranks[r].index_sha256, m.ranks[r].index_sha256, 32) == 0);
		CHECK_EQ(out.ranks[r].table.count, 3);
		for (uint32_t i = 0; i < 3; i++) {
			const struct ckpt_tensor *a = &out.ranks[r].table.tensors[i];
			const struct ckpt_tensor *b = &m.ranks[r].table.tensors[i];
			CHECK(strcmp(a->name, b->name) == 0);
			CHECK_EQ(a->dtype, b->dtype);
			CHECK_EQ(a->ndim, b->ndim);
			CHECK_EQ(a->crc32c, b->crc32c);
			CHECK_EQ(a->nbytes, b->nbytes);
			CHECK_EQ(a->data_offset, b->data_offset);
			CHECK(memcmp(a->shape, b->shape, sizeof(a->shape)) == 0);
			CHECK(memcmp(a->offset, b->offset, sizeof(a->offset)) == 0);
			CHECK(memcmp(a->global_shape, b->global_shape, sizeof(a->global_shape)) == 0);
		}
	}
	/* Encoding the decoded manifest gives the same text. */
	{
		char *again = NULL;
		size_t alen = 0;
		CHECK_EQ(ckpt_manifest_encode(&out, &again, &alen), 0);
		CHECK(again && alen == len && memcmp(again, text, len) == 0);
		free(again);
	}
	ckpt_manifest_free(&out);

	/* Any edit without resealing: the checksum catches it. */
	edited = strdup(text);
	char *p = strstr(edited, "\"step\": 1200");
	CHECK(p != NULL);
	if (p) {
		p[9] = '3';
		CHECK_EQ(ckpt_manifest_decode(edited, len, &out, err, sizeof(err)), -EBADMSG);
		CHECK(strstr(err, "checksum") != NULL);
		p[9] = '1';
	}
	p = strstr(edited, "crc32c:");
	p[7] = p[7] == '0' ? '1' : '0';
	CHECK_EQ(ckpt_manifest_decode(edited, len, &out, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "checksum") != NULL);
	free(edited);

	/* Reformatting is fine: the checksum is over the canonical form. */
	{
		json_t *root = json_loads(text, 0, NULL);
		char *compact = json_dumps(root, JSON_COMPACT);
		CHECK_EQ(ckpt_manifest_decode(compact, strlen(compact), &out, err, sizeof(err)), 0);
		ckpt_manifest_free(&out);
		free(compact);
		json_decref(root);
	}

	/* Resealed edits that break the content. */
	CHECK_EQ(decode_edited(text, e_none, NULL), 0);
	CHECK_EQ(decode_edited(text, e_swap_ranks, NULL), 0); /* order does not matter */
	CHECK_EQ(decode_edited(text, e_extra_key, NULL), 0); /* unknown keys are ignored */
	CHECK_EQ(decode_edited(text, e_drop_rank, "ranks"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_dup_rank, "ranks[2].rank"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_version, "version"), -EPROTONOSUPPORT);
	CHECK_EQ(decode_edited(text, e_format, "format"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_world, "ranks"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_neg_step, "step"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_str_step, "step"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_real_step, "step"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_big_step, "step"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_job, "job"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_no_job, "job"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_chunk, "chunk_bytes"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_shard_name, "ranks[3].shard"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_sha, "ranks[0].index_sha256"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_shape, "ranks[3].tensors[0]"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_dtype, "ranks[1].tensors[1].dtype"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_tname, "ranks[1].tensors[2].name"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_overlap, "overlaps"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_dup_name, "more than once"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_outside, "ranks[2]"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_crc_range, "ranks[0].tensors[0].crc32c"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_ndim, "ranks[0].tensors[0]"), -EBADMSG);
	CHECK_EQ(decode_edited(text, e_tensors_type, "ranks[0].tensors"), -EBADMSG);

	/* Not JSON, not an object, duplicate keys, truncated. */
	CHECK_EQ(ckpt_manifest_decode("", 0, &out, err, sizeof(err)), -EBADMSG);
	CHECK_EQ(ckpt_manifest_decode("[]", 2, &out, err, sizeof(err)), -EBADMSG);
	CHECK_EQ(ckpt_manifest_decode("{\"a\":1,\"a\":2}", 13, &out, err, sizeof(err)), -EBADMSG);
	CHECK_EQ(ckpt_manifest_decode(text, len / 2, &out, err, sizeof(err)), -EBADMSG);

	/* The encoder refuses what the decoder would. */
	m.ranks[1].rank = 2;
	CHECK_EQ(ckpt_manifest_encode(&m, &edited, NULL), -EINVAL);
	m.ranks[1].rank = 1;
	m.ranks[1].table.tensors[1].data_offset = 0;
	CHECK_EQ(ckpt_manifest_encode(&m, &edited, NULL), -EINVAL);
	m.ranks[1].table.tensors[1].data_offset = 303104;
	m.step = (uint64_t)INT64_MAX + 1;
	CHECK_EQ(ckpt_manifest_encode(&m, &edited, NULL), -EINVAL);
	m.step = 10000000000ull;
	CHECK_EQ(ckpt_manifest_encode(&m, &edited, NULL), -EINVAL);
	m.step = 1200;
	CHECK_EQ(ckpt_manifest_encode(&m, &edited, NULL), 0);
	free(edited);

	/* Every name the name check takes, the manifest holds (the commit
	 * can never fail on a name that was accepted at save time), and a
	 * name it refuses is refused by the encoder too. */
	{
		static const char *const names[] = {
			"gr\303\266\303\237e", "emoji\xf0\x9f\x98\x80", "\xef\xbf\xbf",
			"\xf4\x8f\xbf\xbf", "c1\xc2\x85", "sp ace", "w\xff", "sur\xed\xa0\x80",
		};
		char *saved = m.ranks[1].table.tensors[2].name;

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			bool ok = ckpt_tensor_name_check(names[i], strlen(names[i])) == 0;
			struct ckpt_manifest back;

			m.ranks[1].table.tensors[2].name = (char *)names[i];
			int r = ckpt_manifest_encode(&m, &edited, &len);
			if (r != (ok ? 0 : -EINVAL)) {
				fprintf(stderr, "name %zu (check says %d): encode %d\n", i, ok, r);
				check_failures++;
			}
			if (r == 0) {
				CHECK_EQ(ckpt_manifest_decode(edited, len, &back, err, sizeof(err)), 0);
				CHECK(strcmp(back.ranks[1].table.tensors[2].name, names[i]) == 0);
				ckpt_manifest_free(&back);
				free(edited);
			}
		}
		m.ranks[1].table.tensors[2].name = saved;
	}

	free(text);
	ckpt_manifest_free(&m);
	ckpt_manifest_free(NULL);
	return check_result("test-manifest");
}
