/*
 * event_order: nnc writes no caller memory after the event a caller waits on has
 * signalled. Run under valgrind by tests/event_order.rs: a write into a block freed
 * after nnc_event_wait is an "Invalid write", and a caller allocation reusing that
 * block must keep its contents.
 *
 *   event_order MODEL.nnc KEY_FILE
 *
 * Three rounds, each freeing an output buffer as soon as the contract allows:
 *   1. the audit's reproduction: a fenced compute gated by a caller event; signalling
 *      the compute's own event must be refused (NNC_RESULT_BAD_STATE). Had it been
 *      accepted, the wait would return at once, the buffer be freed, and the compute,
 *      released by its gate afterwards, write into the freed block;
 *   2. an asynchronous compute, its event waited for, the buffer freed at once;
 *   3. a fenced compute still waiting for its gate when its execution is freed: it is
 *      cancelled, so the buffer may be freed when nnc_execution_free returns.
 * Exit status 0 when every check holds, 1 otherwise (with a message on stderr).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnc.h"

static int failures = 0;

static void check(int ok, const char *what, NncResult r) {
    if (!ok) {
        fprintf(stderr, "event_order: FAILED: %s (%s: %s)\n", what,
                nnc_result_name((int32_t)r), nnc_last_error_message());
        failures++;
    }
}

/* Gives nnc's workers time to make a late write, if any was going to happen. */
static void pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A new block of `size` bytes filled with 0x5A, checked later by intact(). */
static unsigned char *probe(size_t size) {
    unsigned char *p = malloc(size);
    if (p) memset(p, 0x5A, size);
    return p;
}

static int intact(const unsigned char *p, size_t size) {
    for (size_t i = 0; i < size; i++)
        if (p[i] != 0x5A) return 0;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: event_order MODEL.nnc KEY_FILE\n");
        return 2;
    }
    NncKey *key = NULL;
    NncModel *model = NULL;
    NncResult r = nnc_key_from_file(argv[2], &key);
    check(r == NNC_RESULT_NO_ERROR, "reading the key", r);
    r = nnc_model_load_file(argv[1], key, &model);
    nnc_key_free(key);
    check(r == NNC_RESULT_NO_ERROR, "loading the model", r);
    if (failures) return 1;

    NncOperandInfo in_info, out_info;
    r = nnc_model_get_input(model, 0, &in_info);
    check(r == NNC_RESULT_NO_ERROR, "input 0", r);
    r = nnc_model_get_output(model, 0, &out_info);
    check(r == NNC_RESULT_NO_ERROR, "output 0", r);
    if (failures || in_info.byte_size == 0 || out_info.byte_size == 0) return 1;
    size_t out_bytes = out_info.byte_size;
    float *input = calloc(1, in_info.byte_size);
    if (!input) return 1;
    for (size_t i = 0; i < in_info.byte_size / sizeof(float); i++) input[i] = (float)(i % 7) * 0.25f;

    /* Round 1: the audit's reproduction. */
    NncExecution *e = NULL;
    r = nnc_execution_create(model, &e);
    check(r == NNC_RESULT_NO_ERROR, "creating an execution", r);
    r = nnc_execution_set_input(e, 0, input, in_info.byte_size);
    check(r == NNC_RESULT_NO_ERROR, "binding the input", r);
    void *out = malloc(out_bytes);
    r = nnc_execution_set_output(e, 0, out, out_bytes);
    check(r == NNC_RESULT_NO_ERROR, "binding the output", r);
    NncEvent *gate = NULL, *done = NULL;
    r = nnc_event_create(&gate);
    check(r == NNC_RESULT_NO_ERROR, "creating the gate", r);
    const NncEvent *deps[1] = {gate};
    r = nnc_execution_start_compute_with_dependencies(e, deps, 1, 0, &done);
    check(r == NNC_RESULT_NO_ERROR, "starting the fenced compute", r);
    if (failures) return 1;
    r = nnc_event_signal(done);
    check(r == NNC_RESULT_BAD_STATE, "signalling a compute's event must be BAD_STATE", r);
    int gate_open = 0;
    if (r != NNC_RESULT_NO_ERROR) {
        r = nnc_event_signal(gate);
        check(r == NNC_RESULT_NO_ERROR, "signalling the gate", r);
        gate_open = 1;
    }
    r = nnc_event_wait(done);
    check(r == NNC_RESULT_NO_ERROR, "waiting for the fenced compute", r);
    free(out); /* the contract allows it: the event has signalled */
    unsigned char *p1 = probe(out_bytes);
    if (!gate_open) nnc_event_signal(gate); /* only with the bug: the compute runs now */
    pause_ms(200);
    check(p1 && intact(p1, out_bytes), "no write after the wait (round 1)", NNC_RESULT_NO_ERROR);
    r = nnc_event_signal(done);
    check(r == NNC_RESULT_BAD_STATE, "a done compute's event stays the compute's", r);
    nnc_event_free(done);
    nnc_event_free(gate);
    free(p1);

    /* Round 2: an asynchronous compute, its buffer freed as soon as the wait returns. */
    out = malloc(out_bytes);
    r = nnc_execution_set_output(e, 0, out, out_bytes);
    check(r == NNC_RESULT_NO_ERROR, "binding the output (round 2)", r);
    r = nnc_execution_start_compute(e, &done);
    check(r == NNC_RESULT_NO_ERROR, "starting the asynchronous compute", r);
    r = nnc_event_signal(done);
    check(r == NNC_RESULT_BAD_STATE, "signalling an asynchronous compute's event", r);
    r = nnc_event_wait(done);
    check(r == NNC_RESULT_NO_ERROR, "waiting for the asynchronous compute", r);
    free(out);
    unsigned char *p2 = probe(out_bytes);
    pause_ms(100);
    check(p2 && intact(p2, out_bytes), "no write after the wait (round 2)", NNC_RESULT_NO_ERROR);
    nnc_event_free(done);
    free(p2);
    nnc_execution_free(e);

    /* Round 3: freeing the execution cancels a compute still waiting for its gate. */
    r = nnc_execution_create(model, &e);
    check(r == NNC_RESULT_NO_ERROR, "creating an execution (round 3)", r);
    r = nnc_execution_set_input(e, 0, input, in_info.byte_size);
    check(r == NNC_RESULT_NO_ERROR, "binding the input (round 3)", r);
    out = malloc(out_bytes);
    r = nnc_execution_set_output(e, 0, out, out_bytes);
    check(r == NNC_RESULT_NO_ERROR, "binding the output (round 3)", r);
    r = nnc_event_create(&gate);
    check(r == NNC_RESULT_NO_ERROR, "creating the gate (round 3)", r);
    deps[0] = gate;
    r = nnc_execution_start_compute_with_dependencies(e, deps, 1, 0, &done);
    check(r == NNC_RESULT_NO_ERROR, "starting the fenced compute (round 3)", r);
    nnc_execution_free(e);
    free(out); /* nnc writes no bound buffer after the free returns */
    unsigned char *p3 = probe(out_bytes);
    r = nnc_event_signal(gate);
    check(r == NNC_RESULT_NO_ERROR, "the caller's gate still signals", r);
    r = nnc_event_wait(done);
    check(r == NNC_RESULT_OP_FAILED, "the cancelled compute's event fails", r);
    pause_ms(100);
    check(p3 && intact(p3, out_bytes), "no write after the free (round 3)", NNC_RESULT_NO_ERROR);
    /* Freed handles are refused, not dereferenced; freeing twice is harmless. */
    r = nnc_execution_compute(e);
    check(r == NNC_RESULT_BAD_DATA, "computing a freed execution", r);
    nnc_event_free(done);
    r = nnc_event_wait(done);
    check(r == NNC_RESULT_BAD_DATA, "waiting on a freed event", r);
    nnc_event_free(done);
    nnc_event_free(gate);
    nnc_execution_free(e);
    free(p3);

    nnc_model_free(model);
    free(input);
    if (failures) return 1;
    printf("ok\n");
    return 0;
}
