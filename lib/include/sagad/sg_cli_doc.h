/* sg_cli_doc: a program's man page and shell completions, written from
 * the same command table as its --help (sg_cli), so the three cannot
 * drift.  `PROG --man` and `PROG --completion bash|zsh` print them;
 * `make docs` keeps the copies under docs/man and docs/completion. */
#ifndef SAGAD_CLI_DOC_H
#define SAGAD_CLI_DOC_H

#include <stdio.h>

#include "sagad/sg_cli.h"

/* The global options every program takes, for --help, the man page and
 * the completions alike (NULL-terminated). */
extern const sg_cli_opt_t sg_cli_global_opts[];

/* Writes the man page (roff, section 1). */
void sg_cli_write_man(const sg_cli_app_t *app, FILE *out);

/* Writes the completion script for shell ("bash" or "zsh"); -1 for
 * another shell (nothing written). */
int sg_cli_write_completion(const sg_cli_app_t *app, const char *shell, FILE *out);

#endif
