/*
 * classify: runs a compiled nnc model on one float32 .npy input and prints the top-5
 * class indices of the model's first output, one per line, best first.
 *
 *   classify MODEL.nnc KEY_FILE INPUT.npy
 *
 * KEY_FILE is what `nnc keygen` writes (hex text); give "-" for a model compiled
 * without a key. Build: see Makefile (cargo build -p nnc-runtime-capi --release, then
 * make -C examples/c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnc.h"

#define TOP 5

/* Prints the failed call, its result code and nnc's message; returns 1. */
static int fail(const char *what, NncResult r) {
    fprintf(stderr, "classify: %s: %s: %s\n", what, nnc_result_name((int32_t)r),
            nnc_last_error_message());
    return 1;
}

/* The float32 little-endian payload of a .npy file (version 1, 2 or 3 header),
 * C order. Returns 0 and sets *data (malloc'd) and *count, or -1 with a message. */
static int read_npy_f32(const char *path, float **data, size_t *count) {
    *data = NULL;
    *count = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    unsigned char pre[12];
    int rc = -1;
    char *header = NULL;
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fprintf(stderr, "%s: not a .npy file\n", path);
        goto done;
    }
    size_t header_len;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) goto truncated;
        header_len = (size_t)pre[8] | ((size_t)pre[9] << 8);
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 8, 1, 4, f) != 4) goto truncated;
        header_len = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)pre[10] << 16) |
                     ((size_t)pre[11] << 24);
    } else {
        fprintf(stderr, "%s: unsupported .npy version %u\n", path, pre[6]);
        goto done;
    }
    if (header_len == 0 || header_len > (1u << 20)) {
        fprintf(stderr, "%s: implausible .npy header length %zu\n", path, header_len);
        goto done;
    }
    header = malloc(header_len + 1);
    if (!header) goto oom;
    if (fread(header, 1, header_len, f) != header_len) goto truncated;
    header[header_len] = '\0';
    if (strlen(header) != header_len) {
        fprintf(stderr, "%s: NUL byte in the .npy header\n", path);
        goto done;
    }
    if (!strstr(header, "'descr': '<f4'")) {
        fprintf(stderr, "%s: only little-endian float32 ('<f4') arrays are supported\n",
                path);
        goto done;
    }
    if (strstr(header, "'fortran_order': True")) {
        fprintf(stderr, "%s: Fortran-order arrays are not supported\n", path);
        goto done;
    }
    /* 'shape': (d0, d1, ...) -> element count, overflow-checked. */
    const char *shape = strstr(header, "'shape':");
    const char *open = shape ? strchr(shape, '(') : NULL;
    const char *close = open ? strchr(open, ')') : NULL;
    if (!close) {
        fprintf(stderr, "%s: no shape in the .npy header\n", path);
        goto done;
    }
    size_t n = 1;
    for (const char *p = open + 1; p < close;) {
        if (*p == ' ' || *p == ',') {
            p++;
            continue;
        }
        if (*p < '0' || *p > '9') {
            fprintf(stderr, "%s: bad shape in the .npy header\n", path);
            goto done;
        }
        size_t d = 0;
        while (p < close && *p >= '0' && *p <= '9') {
            size_t digit = (size_t)(*p - '0');
            if (d > (SIZE_MAX - digit) / 10) goto too_big;
            d = d * 10 + digit;
            p++;
        }
        if (d != 0 && n > SIZE_MAX / sizeof(float) / d) goto too_big;
        n *= d;
    }
    if (n == 0) {
        fprintf(stderr, "%s: the array is empty\n", path);
        goto done;
    }
    *data = malloc(n * sizeof(float));
    if (!*data) goto oom;
    unsigned char *bytes = (unsigned char *)*data;
    if (fread(bytes, sizeof(float), n, f) != n) goto truncated;
    for (size_t i = 0; i < n; i++) { /* little-endian to host order */
        const unsigned char *b = bytes + 4 * i;
        uint32_t u = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
                     ((uint32_t)b[3] << 24);
        memcpy(&(*data)[i], &u, sizeof u);
    }
    *count = n;
    rc = 0;
    goto done;
truncated:
    fprintf(stderr, "%s: truncated .npy file\n", path);
    goto done;
too_big:
    fprintf(stderr, "%s: the array is too large\n", path);
    goto done;
oom:
    fprintf(stderr, "%s: out of memory\n", path);
done:
    if (rc != 0) {
        free(*data);
        *data = NULL;
    }
    free(header);
    fclose(f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.nnc KEY_FILE|- INPUT.npy\n", argv[0]);
        return 2;
    }
    int status = 1;
    NncKey *key = NULL;
    NncModel *model = NULL;
    NncExecution *execution = NULL;
    float *input = NULL;
    float *output = NULL;
    void **scratch = NULL;
    uint32_t n_outputs = 0;
    size_t input_count = 0;
    NncResult r;

    if (strcmp(argv[2], "-") != 0 && (r = nnc_key_from_file(argv[2], &key)) != NNC_RESULT_NO_ERROR) {
        status = fail("reading the key", r);
        goto out;
    }
    r = nnc_model_load_file(argv[1], key, &model);
    nnc_key_free(key); /* no longer needed once the model is loaded */
    key = NULL;
    if (r != NNC_RESULT_NO_ERROR) {
        status = fail("loading the model", r);
        goto out;
    }
    if (read_npy_f32(argv[3], &input, &input_count) != 0) goto out;

    NncOperandInfo in_info, out_info;
    uint32_t n_inputs = 0;
    if ((r = nnc_model_input_count(model, &n_inputs)) != NNC_RESULT_NO_ERROR ||
        (r = nnc_model_get_input(model, 0, &in_info)) != NNC_RESULT_NO_ERROR ||
        (r = nnc_model_get_output(model, 0, &out_info)) != NNC_RESULT_NO_ERROR) {
        status = fail("describing the model", r);
        goto out;
    }
    if (n_inputs != 1 || in_info.element_type != NNC_ELEMENT_TYPE_FLOAT32 ||
        out_info.element_type != NNC_ELEMENT_TYPE_FLOAT32) {
        fprintf(stderr, "classify: needs a model with one float32 input and a float32 output\n");
        goto out;
    }
    if ((r = nnc_execution_create(model, &execution)) != NNC_RESULT_NO_ERROR) {
        status = fail("creating an execution", r);
        goto out;
    }
    size_t input_bytes = input_count * sizeof(float);
    if (in_info.byte_size != 0) {
        r = nnc_execution_set_input(execution, 0, input, input_bytes);
    } else {
        /* Unknown dimensions: a batch of one, the rest from the element count. */
        fprintf(stderr, "classify: input '%s' has unknown dimensions; not supported here\n",
                in_info.name);
        goto out;
    }
    if (r != NNC_RESULT_NO_ERROR) {
        status = fail("binding the input", r);
        goto out;
    }
    /* Outputs after the first are computed into scratch buffers and ignored. */
    if ((r = nnc_model_output_count(model, &n_outputs)) != NNC_RESULT_NO_ERROR) {
        status = fail("describing the model", r);
        goto out;
    }
    scratch = calloc(n_outputs, sizeof *scratch);
    if (!scratch) goto oom;
    for (uint32_t k = 1; k < n_outputs; k++) {
        NncOperandInfo info;
        if ((r = nnc_model_get_output(model, k, &info)) != NNC_RESULT_NO_ERROR) {
            status = fail("describing the model", r);
            goto out;
        }
        if (info.byte_size == 0) {
            fprintf(stderr, "classify: output %u has unknown dimensions; not supported here\n", k);
            goto out;
        }
        if (!(scratch[k] = malloc(info.byte_size))) goto oom;
        if ((r = nnc_execution_set_output(execution, k, scratch[k], info.byte_size)) != NNC_RESULT_NO_ERROR) {
            status = fail("binding an output", r);
            goto out;
        }
    }
    /* The first output's size: declared, or (unknown dimensions) what a compute says. */
    size_t output_bytes = out_info.byte_size != 0 ? out_info.byte_size : 4096;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(output);
        if (!(output = malloc(output_bytes))) goto oom;
        if ((r = nnc_execution_set_output(execution, 0, output, output_bytes)) != NNC_RESULT_NO_ERROR) {
            status = fail("binding the output", r);
            goto out;
        }
        r = nnc_execution_compute(execution);
        if (r == NNC_RESULT_OUTPUT_INSUFFICIENT_SIZE && attempt == 0 &&
            nnc_execution_get_output_size(execution, 0, &output_bytes) == NNC_RESULT_NO_ERROR) {
            continue; /* retry with the size the compute needed */
        }
        break;
    }
    if (r != NNC_RESULT_NO_ERROR) {
        status = fail("computing", r);
        goto out;
    }
    size_t out_bytes = 0;
    if ((r = nnc_execution_get_output_size(execution, 0, &out_bytes)) != NNC_RESULT_NO_ERROR) {
        status = fail("reading the output size", r);
        goto out;
    }
    size_t n = out_bytes / sizeof(float);
    /* Top 5 by insertion into a sorted list (ties: the lower index first). */
    size_t best[TOP];
    size_t found = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pos = found;
        while (pos > 0 && output[i] > output[best[pos - 1]]) pos--;
        if (pos >= TOP) continue;
        size_t end = found < TOP ? found : TOP - 1;
        for (size_t j = end; j > pos; j--) best[j] = best[j - 1];
        best[pos] = i;
        if (found < TOP) found++;
    }
    for (size_t i = 0; i < found; i++) printf("%zu\n", best[i]);
    uint64_t on_device = 0, total = 0;
    if (nnc_execution_get_timing(execution, &on_device, &total) == NNC_RESULT_NO_ERROR) {
        fprintf(stderr, "classify: %.3f ms on the device, %.3f ms in all\n", on_device / 1e6,
                total / 1e6);
    }
    status = 0;
    goto out;
oom:
    fprintf(stderr, "classify: out of memory\n");
out:
    if (scratch) {
        for (uint32_t k = 0; k < n_outputs; k++) free(scratch[k]);
        free(scratch);
    }
    nnc_execution_free(execution);
    nnc_model_free(model);
    nnc_key_free(key);
    free(input);
    free(output);
    return status;
}
