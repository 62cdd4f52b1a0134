/* libFuzzer target: a tool registry file, through the loader every binary
 * shares (lib/contract/sg_registry.c): refused with a path and a rule, or loaded,
 * never a crash, a leak or undefined behaviour. */
#include <stdint.h>
#include <stdlib.h>

#include "sagad/sg_config.h"
#include "sagad/sg_registry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sg_config_t *cfg;
    sg_registry_t *reg;
    sg_err_t err;

    if (!cfg)
        cfg = sg_config_new();
    reg = sg_registry_parse("fuzz.json", (const char *)data, size, cfg, NULL, &err);
    if (!reg && !err.code[0])
        abort(); /* a refusal always says why */
    for (size_t i = 0; reg && i < reg->ntools; i++)
        if (!sg_registry_find(reg, reg->tools[i].name))
            abort();
    sg_registry_destroy(reg);
    return 0;
}
