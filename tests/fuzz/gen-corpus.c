/* SPDX-License-Identifier: MIT */
/*
 * Writes the seed corpora: valid encodings of every message, tables,
 * indexes and manifests, plus a few malformed ones.
 *   gen-corpus <dir>   (writes <dir>/{wire,table,index,manifest}/...)
 * The output is committed under tests/fuzz/corpus/; run it again only
 * when a format changes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto.h"
#include "sample.h"

static const char *root;
static int errors;

static void put(const char *kind, const char *name, const void *data, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, kind);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", root, kind, name);
	f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		errors++;
	}
}

static void put_msg(const char *name, const struct ckpt_msg *m)
{
	uint8_t buf[CKPT_MSG_MAX_BYTES];
	ssize_t n = ckpt_msg_encode(m, buf, sizeof(buf));
	char bad[64];

	if (n < 0) {
		fprintf(stderr, "encode %s: %zd\n", name, n);
		errors++;
		return;
	}
	put("wire", name, buf, (size_t)n);
	/* Malformed relatives: truncated, and with a byte flipped. */
	snprintf(bad, sizeof(bad), "%s-truncated", name);
	put("wire", bad, buf, (size_t)n - 1);
	if (n > 16) {
		buf[16] ^= 0x80;
		snprintf(bad, sizeof(bad), "%s-flipped", name);
		put("wire", bad, buf, (size_t)n);
	}
}

static void wire(void)
{
	struct ckpt_msg m;

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_HELLO;
	m.seq = 1;
	strcpy(m.u.hello.job, "llama-7b");
	m.u.hello.rank = 1;
	m.u.hello.world_size = 2;
	m.u.hello.max_save_bytes = 1 << 30;
	m.u.hello.pid = 100;
	put_msg("hello", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_HELLO_OK;
	m.seq = 1;
	m.u.hello_ok.slots = 2;
	m.u.hello_ok.flags = CKPT_HELLO_F_SKIP_POLICY;
	m.u.hello_ok.slot_bytes = 2 << 20;
	m.u.hello_ok.arena_bytes = 4 << 20;
	m.u.hello_ok.chunk_bytes = 1 << 20;
	m.u.hello_ok.latest_step = 42;
	put_msg("hello_ok", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_SAVE;
	m.seq = 2;
	m.u.save.step = 43;
	m.u.save.slot = 1;
	m.u.save.data_bytes = 8192;
	m.u.save.table_offset = 8192;
	m.u.save.table_bytes = 120;
	m.u.save.blob_offset = 4096;
	m.u.save.blob_bytes = 10;
	put_msg("save", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_SAVE_OK;
	m.seq = 2;
	m.u.save_ok.step = 43;
	m.u.save_ok.slot = 1;
	put_msg("save_ok", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_STATUS;
	m.u.status.step = 43;
	m.u.status.state = CKPT_STATE_FAILED;
	m.u.status.error = -CKPT_E_ABORTED;
	m.u.status.slot_freed = 1;
	strcpy(m.u.status.reason, "rank 0 disconnected");
	put_msg("status", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_SKIP;
	m.u.step.step = 44;
	put_msg("skip", &m);
	m.type = CKPT_MSG_QUERY;
	put_msg("query", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_LIST;
	m.seq = 9;
	put_msg("list", &m);
	m.type = CKPT_MSG_BYE;
	put_msg("bye", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_LIST_OK;
	m.seq = 9;
	m.u.list_ok.total = 3;
	m.u.list_ok.count = 3;
	m.u.list_ok.steps[0] = 10;
	m.u.list_ok.steps[1] = 20;
	m.u.list_ok.steps[2] = 42;
	put_msg("list_ok", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_RESTORE;
	m.seq = 3;
	m.u.restore.step = CKPT_NO_STEP;
	m.u.restore.flags = CKPT_RESTORE_F_EXACT;
	put_msg("restore", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_RESTORE_OK;
	m.seq = 3;
	m.u.restore_ok.step = 42;
	m.u.restore_ok.flags = CKPT_RESTORE_OK_F_FELL_BACK;
	m.u.restore_ok.data_bytes = 4096;
	m.u.restore_ok.table_offset = 4096;
	m.u.restore_ok.table_bytes = 64;
	strcpy(m.u.restore_ok.warning, "step 43: chunk 0 of rank 1 does not verify");
	put_msg("restore_ok", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_RELEASE;
	m.u.release.slot = 0;
	put_msg("release", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_ERROR;
	m.seq = 4;
	m.u.error.code = -CKPT_E_PROTOCOL;
	strcpy(m.u.error.message, "message before HELLO");
	put_msg("error", &m);

	/* The optional STALL and the features notice that allows it. */
	ckpt_msg_features_notice(&m, CKPT_FEATURES_KNOWN);
	put_msg("features_notice", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_STALL;
	m.seq = 5;
	m.u.stall.step = 43;
	m.u.stall.seconds = 0.0421;
	put_msg("stall", &m);
	{
		/* Values the decoder refuses: NaN, -inf, negative, -0, a day. */
		static const struct {
			const char *name;
			uint64_t bits;
		} bad[] = {
			{ "stall-nan", 0x7ff8000000000000ull },
			{ "stall-minus-inf", 0xfff0000000000000ull },
			{ "stall-negative", 0xbff0000000000000ull },
			{ "stall-minus-zero", 0x8000000000000000ull },
			{ "stall-one-day", 0x40f5180000000000ull },
		};
		uint8_t buf[CKPT_MSG_MAX_BYTES];
		ssize_t n = ckpt_msg_encode(&m, buf, sizeof(buf));

		for (size_t i = 0; n == 32 && i < sizeof(bad) / sizeof(bad[0]); i++) {
			for (int k = 0; k < 8; k++)
				buf[24 + k] = (uint8_t)(bad[i].bits >> (8 * k));
			put("wire", bad[i].name, buf, (size_t)n);
		}
	}
}

/* The optional READ_RANGES and its answer (PROTOCOL.md, Semantics 13). */
static void wire_read_ranges(void)
{
	struct ckpt_msg m;

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_READ_RANGES;
	m.seq = 6;
	m.u.read_ranges.step = 42;
	m.u.read_ranges.slot = 1;
	if (ckpt_msg_read_add(&m, 2, "model.layers.0.mlp.down_proj.weight", 4096, 65536) < 0 ||
	    ckpt_msg_read_add(&m, 0, NULL, 0, 100) < 0 ||
	    ckpt_msg_read_add(&m, 1, "gr\xc3\xb6\xc3\x9f" "e", 7, 0) < 0) {
		fprintf(stderr, "ckpt_msg_read_add failed\n");
		errors++;
		return;
	}
	put_msg("read_ranges", &m);

	memset(&m, 0, sizeof(m));
	m.type = CKPT_MSG_READ_RANGES_OK;
	m.seq = 6;
	m.u.read_ranges_ok.step = 42;
	m.u.read_ranges_ok.slot = 1;
	m.u.read_ranges_ok.count = 3;
	m.u.read_ranges_ok.results[0].total = 1u << 20;
	m.u.read_ranges_ok.results[1].result = -CKPT_E_CORRUPT;
	m.u.read_ranges_ok.results[1].total = 100;
	m.u.read_ranges_ok.results[2].result = -ENOENT;
	strcpy(m.u.read_ranges_ok.message,
	       "j/step-0000000042/rank-000000.shard: chunk 9 fails its CRC-32C");
	put_msg("read_ranges_ok", &m);
}

static void table(void)
{
	struct ckpt_tensor ts[3];
	char names[3][32];
	uint8_t buf[4096];
	ssize_t n;

	sample_tensors(ts, names, 1);
	n = ckpt_table_encode(ts, 3, buf, sizeof(buf));
	put("table", "three", buf, (size_t)n);
	put("table", "three-truncated", buf, (size_t)n - 8);
	n = ckpt_table_encode(ts, 1, buf, sizeof(buf));
	put("table", "one", buf, (size_t)n);
	n = ckpt_table_encode(NULL, 0, buf, sizeof(buf));
	put("table", "empty", buf, (size_t)n);
	/* Layout errors the decoder cannot see: overlap, duplicate name. */
	ts[1].data_offset = 0;
	strcpy(names[2], names[0]);
	n = ckpt_table_encode(ts, 3, buf, sizeof(buf));
	put("table", "overlap-duplicate", buf, (size_t)n);
}

static void index_(void)
{
	struct ckpt_index idx;
	void *buf = NULL;
	ssize_t n;

	for (uint32_t r = 0; r < 2; r++) {
		char name[32];

		if (sample_index(&idx, r) < 0) {
			errors++;
			return;
		}
		n = ckpt_index_encode(&idx, &buf);
		if (n < 0) {
			errors++;
			return;
		}
		snprintf(name, sizeof(name), "rank%u", r);
		put("index", name, buf, (size_t)n);
		if (r == 0) {
			((uint8_t *)buf)[100] ^= 1;
			put("index", "rank0-flipped", buf, (size_t)n);
		}
		free(buf);
		ckpt_index_free(&idx);
	}
	/* Empty table, no blob. */
	sample_index(&idx, 0);
	ckpt_table_free(&idx.table);
	idx.blob_bytes = 0;
	idx.blob_crc32c = 0;
	idx.chunk_count = 0;
	n = ckpt_index_encode(&idx, &buf);
	if (n > 0)
		put("index", "empty", buf, (size_t)n);
	free(buf);
	ckpt_index_free(&idx);
}

static void manifest(void)
{
	struct ckpt_manifest m;
	char *text = NULL;
	size_t len;

	sample_manifest(&m, 2);
	if (ckpt_manifest_encode(&m, &text, &len) < 0) {
		errors++;
		return;
	}
	put("manifest", "two-ranks.json", text, len);
	put("manifest", "two-ranks-truncated.json", text, len / 2);
	free(text);
	ckpt_manifest_free(&m);

	sample_manifest(&m, 1);
	ckpt_table_free(&m.ranks[0].table);
	ckpt_manifest_encode(&m, &text, &len);
	put("manifest", "one-rank-no-tensors.json", text, len);
	/* Same text with a stale checksum. */
	char *p = strstr(text, "\"step\": 1200");
	if (p) {
		p[9] = '3';
		put("manifest", "stale-checksum.json", text, len);
	}
	free(text);
	ckpt_manifest_free(&m);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s <corpus-dir>\n", argv[0]);
		return 2;
	}
	root = argv[1];
	mkdir(root, 0755);
	wire();
	wire_read_ranges();
	table();
	index_();
	manifest();
	return errors ? 1 : 0;
}
