/* libFuzzer target: a command message as a producer sends it, through the
 * decoder and, for a saga.start, the validator against the demo's tool
 * registry (examples/checkout/tools.json).
 *
 * Beyond "no crash, no leak, no undefined behaviour": a message the
 * decoder accepts keeps its identity when it is printed and read again
 * (the worker stores and re-reads what it printed): the same type, the
 * same saga_id, and for a valid saga.start the same stored definition. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_config.h"
#include "sagad/sg_registry.h"
#include "sagad/sg_submit.h"

static sg_registry_t *reg;
static sg_config_t *cfg; /* kept for the run, as the worker keeps it */

static void no_problem(void *opaque, const char *path, const char *rule)
{
    (void)path;
    (void)rule;
    ++*(int *)opaque;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static char text[1 << 16];
    FILE *fp = fopen("examples/checkout/tools.json", "rb");
    size_t len;
    sg_err_t err;

    (void)argc;
    (void)argv;
    if (!fp) {
        fprintf(stderr,
                "fuzz_submit: run from the repository root (examples/checkout/tools.json)\n");
        abort();
    }
    cfg = sg_config_new();
    len = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    reg = sg_registry_parse("examples/checkout/tools.json", text, len, cfg, NULL, &err);
    if (!reg) {
        fprintf(stderr, "fuzz_submit: %s\n", err.message);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const sg_json_limits_t lim = {1 << 16, 64, 20000};
    sg_decoded_t dec, again;
    char *printed, *def, *def2;
    int problems = 0;

    sg_submit_decode(data, size, &lim, &dec);
    if (dec.type == SG_CMD_POISON) {
        if (!dec.err.code[0])
            abort(); /* every refusal has a code */
        sg_json_destroy(dec.doc);
        return 0;
    }
    printed = sg_json_print(dec.doc);
    sg_submit_decode(printed, strlen(printed), &lim, &again);
    if (again.type != dec.type || strcmp(again.saga_id, dec.saga_id) != 0)
        abort(); /* identity changed on the way through the printer */
    if (dec.type == SG_CMD_START && sg_submit_validate(dec.doc, reg, no_problem, &problems) == 0) {
        def = sg_submit_definition(dec.doc);
        def2 = sg_submit_definition(again.doc);
        if (strcmp(def, def2) != 0)
            abort(); /* the stored definition depends on the printing */
        free(def);
        free(def2);
    }
    sg_json_destroy(again.doc);
    sg_json_destroy(dec.doc);
    free(printed);
    return 0;
}
