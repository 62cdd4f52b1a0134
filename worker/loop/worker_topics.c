/* The `topics` command: creates the commands, internal, events and
 * dead-letter topics the configuration names, with --partitions N (default
 * 6; the commands and internal topics should have as many partitions as
 * each other, the most workers that can share the work), and the relay's
 * checkpoint topic (relay.checkpoint_topic, one partition: it holds a
 * record per batch of an exactly-once relay).  Shares nothing with the run
 * but the configuration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker.h"

int worker_cmd_topics(sg_cli_t *cli, int argc, char **argv)
{
    const char *names[] = {
        sg_config_str(cli->cfg, "topic.commands"), sg_config_str(cli->cfg, "topic.internal"),
        sg_config_str(cli->cfg, "topic.events"), sg_config_str(cli->cfg, "topic.dlq"),
        sg_config_str(cli->cfg, "relay.checkpoint_topic")};
    const size_t checkpoints = 4; /* names[checkpoints]: one partition */
    long partitions = 6;
    char errstr[512], *end;
    sg_kafka_t *k;
    sg_err_t err;
    int rc = SG_EXIT_OK;

    if (argc == 3 && strcmp(argv[1], "--partitions") == 0) {
        partitions = strtol(argv[2], &end, 10);
        if (*end || partitions < 1 || partitions > 10000) {
            fprintf(stderr, "%s topics: --partitions must be 1-10000\n", cli->prog);
            return SG_EXIT_USAGE;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s topics [--partitions N]\n", cli->prog);
        return SG_EXIT_USAGE;
    }
    k = sg_kafka_new(cli->cfg, SG_KAFKA_PRODUCER, NULL, errstr, sizeof(errstr));
    if (!k) {
        fprintf(stderr, "%s: Kafka: %s\n", cli->prog, errstr);
        return SG_EXIT_USAGE;
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (sg_kafka_create_topic(k, names[i], i == checkpoints ? 1 : (int)partitions, 30000,
                                  &err) < 0) {
            fprintf(stderr, "%s: topic %s: %s\n", cli->prog, names[i], err.message);
            rc = SG_EXIT_INFRA;
            continue;
        }
        printf("%s\n", names[i]);
    }
    sg_kafka_destroy(k);
    return rc;
}
