// tokfeedctl: the operator's tool. Talks to tokfeedd over its unix socket
// (proto/) and attaches as a rank (libtokfeed); it links nothing of the
// daemon's (`tokfeedd render|tokenize` debug a job's text offline).
#include <CLI/CLI.hpp>

#include "ctl.hpp"

int main(int argc, char** argv) {
  using namespace tokfeed;
  CLI::App app{"tokfeedctl: inspect and drive a tokfeed daemon"};
  app.require_subcommand(1);
  std::string socket = "/run/tokfeed/default.sock";
  app.add_option("--socket,-s", socket, "the daemon's control socket")->capture_default_str();

  bool json = false;
  auto* st = app.add_subcommand("status", "show the daemon, dataset, workers, ranks and throughput");
  st->add_flag("--json", json, "print the status as one JSON object");

  auto* down = app.add_subcommand("shutdown", "stop the daemon cleanly");
  auto* metrics = app.add_subcommand("metrics", "print the daemon's metrics in Prometheus text format");
  auto* watch = app.add_subcommand("watch", "show the status table, refreshed once a second");

  ctl::StreamArgs sa;
  uint64_t count = 0;
  auto add_stream = [&](CLI::App* c) {
    c->add_option("--rank,-r", sa.rank, "rank to attach as")->capture_default_str();
    c->add_option("--count,-n", count, "stop after this many batches");
    c->add_option("--epoch", sa.epoch, "start at this epoch")->capture_default_str();
    c->add_option("--step", sa.step, "start at this step of the epoch")->capture_default_str();
    c->add_option("--world-size", sa.world_size, "the world size the position was saved at (0: the daemon's)")
        ->capture_default_str();
    c->add_option("--base", sa.base, "the first row of the position's epoch segment")->capture_default_str();
  };
  auto* dump = app.add_subcommand("dump", "attach as a rank and print each batch as one JSON line");
  add_stream(dump);
  auto* drain = app.add_subcommand("drain", "attach as a rank, consume and check batches, print a summary");
  add_stream(drain);

  CLI11_PARSE(app, argc, argv);
  sa.socket = socket;
  if (count) sa.count = count;
  if (st->parsed()) return ctl::status(socket, json);
  if (down->parsed()) return ctl::shutdown(socket);
  if (metrics->parsed()) return ctl::metrics(socket);
  if (watch->parsed()) return ctl::watch(socket);
  if (dump->parsed()) return ctl::dump(sa);
  if (drain->parsed()) return ctl::drain(sa);
  return 2;
}
