/* SPDX-License-Identifier: MIT */
/* Names and sizes: errors, element types, tensor slices, states. */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "internal.h"

static const char *service_error(int code)
{
	switch (code) {
	case CKPT_E_PROTOCOL:
		return "ckptd broke the wire protocol";
	case CKPT_E_DISCONNECTED:
		return "disconnected from ckptd (reconnect and retry)";
	case CKPT_E_SKIPPED:
		return "save skipped: no free slot (backpressure policy \"skip\")";
	case CKPT_E_NO_CHECKPOINT:
		return "no committed checkpoint (that verifies)";
	case CKPT_E_CORRUPT:
		return "checkpoint data or format is corrupt (checksum or format check failed)";
	case CKPT_E_TOO_BIG:
		return "save does not fit the slot negotiated at connect (max_save_bytes)";
	case CKPT_E_BAD_NAME:
		return "job or tensor name refused";
	case CKPT_E_NOT_FOUND:
		return "no such tensor in the restored step";
	case CKPT_E_STEP_ORDER:
		return "step not greater than the previous save";
	case CKPT_E_EXISTS:
		return "step already committed";
	case CKPT_E_REFUSED:
		return "ckptd refused the client (credentials, limits or a conflicting world size; "
		       "ckpt_options.error has ckptd's reason)";
	case CKPT_E_ABORTED:
		return "step abandoned: another rank failed or left";
	case CKPT_E_BUSY:
		return "slot or rank in use";
	case CKPT_E_VERSION:
		return "protocol or format version not understood";
	default:
		return NULL;
	}
}

CKPT_EXPORT const char *ckpt_strerror(int err)
{
	const char *s;
	int code;

	if (err == 0)
		return "success";
	if (err == INT_MIN)
		return "unknown error";
	code = err < 0 ? -err : err;
	s = service_error(code);
	if (s)
		return s;
	/* strerror() may use a shared buffer; the descriptions are static. */
	s = strerrordesc_np(code);
	return s ? s : "unknown error";
}

CKPT_EXPORT size_t ckpt_dtype_size(int dtype)
{
	if (dtype <= 0)
		return 0;
	return ckpt_proto_dtype_size((uint32_t)dtype);
}

CKPT_EXPORT const char *ckpt_dtype_name(int dtype)
{
	if (dtype <= 0)
		return NULL;
	return ckpt_proto_dtype_name((uint32_t)dtype);
}

int tensor_desc_check(const ckpt_tensor_desc *desc, bool check_name, uint64_t *bytes)
{
	uint64_t n;

	if (check_name) {
		size_t len;

		if (!desc->name)
			return -CKPT_E_BAD_NAME;
		len = strnlen(desc->name, CKPT_TENSOR_NAME_MAX + 1);
		if (ckpt_tensor_name_check(desc->name, len) < 0)
			return -CKPT_E_BAD_NAME;
	}
	n = ckpt_dtype_size((int)desc->dtype);
	if (n == 0 || desc->dtype > INT_MAX || desc->ndim > CKPT_MAX_DIMS)
		return -EINVAL;
	for (uint32_t d = 0; d < desc->ndim; d++) {
		if (desc->offset[d] > desc->global_shape[d] ||
		    desc->shape[d] > desc->global_shape[d] - desc->offset[d])
			return -EINVAL;
		if (__builtin_mul_overflow(n, desc->shape[d], &n))
			return -EOVERFLOW;
	}
	*bytes = n;
	return 0;
}

int tensor_desc_load(const ckpt_tensor_desc *in, ckpt_tensor_desc *out)
{
	const size_t v0_1 = offsetof(ckpt_tensor_desc, struct_size);
	uint32_t size = in->struct_size;

	memset(out, 0, sizeof(*out));
	/* 0, and anything short of a layout with struct_size in it (such as
	 * what a caller that never set the field left there): the original
	 * fields, which every caller has. */
	if (size < v0_1 + sizeof(in->struct_size)) {
		memcpy(out, in, v0_1);
		return 0;
	}
	/* Past any plausible layout: not read at all. */
	if (size > CKPT_TENSOR_DESC_MAX_BYTES)
		return -E2BIG;
	/* A newer caller's fields that this library does not know must be
	 * unset: ignoring a set one would misread the tensor. */
	for (size_t i = sizeof(*out); i < size; i++)
		if (((const unsigned char *)in)[i] != 0)
			return -E2BIG;
	memcpy(out, in, size < sizeof(*out) ? size : sizeof(*out));
	out->struct_size = (uint32_t)sizeof(*out);
	return 0;
}

void tensor_desc_from_v0_1(const struct ckpt_tensor_desc_v0_1 *in, ckpt_tensor_desc *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out, in, sizeof(*in));
}

CKPT_SYMVER(tensor_bytes_impl, ckpt_tensor_bytes);

CKPT_EXPORT uint64_t tensor_bytes_impl(const ckpt_tensor_desc *desc);
CKPT_EXPORT uint64_t tensor_bytes_impl(const ckpt_tensor_desc *desc)
{
	ckpt_tensor_desc d;
	uint64_t bytes;

	if (!desc || tensor_desc_load(desc, &d) < 0 || tensor_desc_check(&d, false, &bytes) < 0)
		return 0;
	return bytes;
}

CKPT_EXPORT uint64_t tensor_bytes_impl_v0_1(const struct ckpt_tensor_desc_v0_1 *desc);
CKPT_EXPORT uint64_t tensor_bytes_impl_v0_1(const struct ckpt_tensor_desc_v0_1 *desc)
{
	ckpt_tensor_desc d;

	if (!desc)
		return 0;
	tensor_desc_from_v0_1(desc, &d);
	return tensor_bytes_impl(&d);
}

CKPT_EXPORT const char *ckpt_state_name(int state)
{
	switch (state) {
	case CKPT_STATE_UNKNOWN:
		return "unknown";
	case CKPT_STATE_PENDING:
		return "pending";
	case CKPT_STATE_DURABLE:
		return "durable";
	case CKPT_STATE_COMMITTED:
		return "committed";
	case CKPT_STATE_SKIPPED:
		return "skipped";
	case CKPT_STATE_FAILED:
		return "failed";
	default:
		return "invalid state";
	}
}
