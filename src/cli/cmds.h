/* One entry point per command, each in src/cmd_<verb>.c. argv[0] is the command name. */
#ifndef HOTCOUNT_CMDS_H
#define HOTCOUNT_CMDS_H

int hc_cmd_demo(int argc, char **argv);
int hc_cmd_stage1(int argc, char **argv);
int hc_cmd_stage2(int argc, char **argv);
int hc_cmd_run(int argc, char **argv);
int hc_cmd_produce(int argc, char **argv);
int hc_cmd_init(int argc, char **argv);
int hc_cmd_get(int argc, char **argv);
int hc_cmd_top(int argc, char **argv);
int hc_cmd_verify(int argc, char **argv);
int hc_cmd_mock_broker(int argc, char **argv);
int hc_cmd_config(int argc, char **argv);
int hc_cmd_metrics(int argc, char **argv);
int hc_cmd_serve(int argc, char **argv);
int hc_cmd_status(int argc, char **argv);
int hc_cmd_dlq(int argc, char **argv);
int hc_cmd_hotkeys(int argc, char **argv);
/* hotcount --version (-V): versions of hotcount and of every library it runs with. */
int hc_cmd_version(int argc, char **argv);

#endif
