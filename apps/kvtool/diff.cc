// kvtool diff A B: per-layer max/mean absolute error between two caches
// (e.g. a file and its quantized conversion). Exit 3 when the caches do not
// line up, or when --max-error is given and some layer exceeds it.
#include <cstdio>

#include "apps/kvtool/kvtool.h"
#include "kvstore/cache_diff.h"

namespace kvtool {
namespace {

using kvstore::Json;

struct DiffArgs {
  std::string a, b;
  bool json = false;
  std::optional<double> max_error;
};

int RunDiff(const DiffArgs& args) {
  kvstore::PromptCacheReader::Options open;
  open.prefetch = true;
  auto a = kvstore::PromptCacheReader::Open(kvstore::Env::Default(), args.a, open);
  if (!a.ok()) return Fail(a.status());
  auto b = kvstore::PromptCacheReader::Open(kvstore::Env::Default(), args.b, open);
  if (!b.ok()) return Fail(b.status());
  const size_t layers = std::min((*a)->num_layers(), (*b)->num_layers());
  bool ok = (*a)->num_layers() == (*b)->num_layers();
  Json rows = Json::MakeArray();
  if (!args.json) {
    std::printf("%-5s %-20s %-20s %12s %12s  %s\n", "layer", "class A", "class B", "max_abs", "mean_abs", "note");
  }
  double worst = 0;
  uint64_t identical = 0;
  for (size_t i = 0; i < layers; ++i) {
    auto la = (*a)->ReadLayer(i);
    if (!la.ok()) return Fail(la.status());
    auto lb = (*b)->ReadLayer(i);
    if (!lb.ok()) return Fail(lb.status());
    auto d = kvstore::DiffLayers(*la, *lb);
    if (!d.ok()) return Fail(d.status());
    const bool over = args.max_error && d->max_abs_error > *args.max_error;
    ok = ok && d->comparable && !over;
    worst = std::max(worst, d->max_abs_error);
    identical += d->identical;
    const std::string note = !d->comparable ? "not comparable: " + d->mismatch
                             : d->identical ? "identical"
                             : !d->same_meta ? "meta state differs" : "";
    if (args.json) {
      Json r = Json::MakeObject();
      r["index"] = Json(static_cast<int64_t>(i));
      r["class_a"] = Json(d->class_a);
      r["class_b"] = Json(d->class_b);
      r["comparable"] = Json(d->comparable);
      r["identical"] = Json(d->identical);
      r["same_meta_state"] = Json(d->same_meta);
      r["values"] = Json(d->values);
      r["max_abs_error"] = Json(d->max_abs_error);
      r["mean_abs_error"] = Json(d->mean_abs_error);
      if (!d->comparable) r["mismatch"] = Json(d->mismatch);
      rows.Push(std::move(r));
    } else {
      std::printf("%-5zu %-20s %-20s %12.6g %12.6g  %s\n", i, d->class_a.c_str(), d->class_b.c_str(),
                  d->max_abs_error, d->mean_abs_error, note.c_str());
    }
  }
  if (args.json) {
    Json out = Json::MakeObject();
    out["a"] = Json(args.a);
    out["b"] = Json(args.b);
    out["layers_a"] = Json(static_cast<int64_t>((*a)->num_layers()));
    out["layers_b"] = Json(static_cast<int64_t>((*b)->num_layers()));
    out["identical_layers"] = Json(identical);
    out["max_abs_error"] = Json(worst);
    out["layers"] = std::move(rows);
    PrintJson(out);
  } else {
    std::printf("%zu layers compared, %llu identical, max abs error %.6g\n", layers,
                static_cast<unsigned long long>(identical), worst);
  }
  if ((*a)->num_layers() != (*b)->num_layers()) {
    return Fail(kExitCorruption, "the files hold " + std::to_string((*a)->num_layers()) + " and " +
                                     std::to_string((*b)->num_layers()) + " layers");
  }
  if (!ok) return Fail(kExitCorruption, args.max_error ? "the caches differ beyond --max-error" : "the caches do not line up");
  return kExitOk;
}

}  // namespace

Runner RegisterDiff(CLI::App& app) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* cmd = app.add_subcommand("diff", "Per-layer max/mean absolute error between two cache files");
  cmd->add_option("A", args->a, "first prompt-cache file")->required()->transform(UserPath());
  cmd->add_option("B", args->b, "second prompt-cache file")->required()->transform(UserPath());
  cmd->add_flag("--json", args->json, "one JSON object instead of the table");
  cmd->add_option("--max-error", args->max_error, "exit 3 when a layer's max abs error exceeds this (0: exact)");
  return [args, cmd] { return *cmd ? RunDiff(*args) : -1; };
}

}  // namespace kvtool
