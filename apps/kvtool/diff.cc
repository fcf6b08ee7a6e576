// kvtool diff A B: per-layer max/mean absolute error between two caches
// (e.g. a file and its quantized conversion). Exit 3 when the caches do not
// line up (different layer counts; layers of different token counts or
// tensor shapes, which are not comparable and so never identical), or when
// --max-error is given and some layer exceeds it.
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

// "37" or "?" (a cache without a scalar offset).
std::string TokensText(const kvstore::PromptCacheReader& r) {
  const std::optional<int64_t> t = r.info().tokens();
  return t ? std::to_string(*t) : "?";
}

// Why the caches cannot be compared, for the final error: the layer counts,
// else how many layers do not line up (and the token counts, the usual cause).
std::string NotComparableMessage(const DiffArgs& args, const kvstore::PromptCacheReader& a,
                                 const kvstore::PromptCacheReader& b, size_t layers, uint64_t incomparable) {
  if (a.num_layers() != b.num_layers()) {
    return "the files hold " + std::to_string(a.num_layers()) + " and " + std::to_string(b.num_layers()) + " layers";
  }
  std::string msg = args.a + " and " + args.b + " do not line up: " + std::to_string(incomparable) + " of " +
                    std::to_string(layers) + " layers are not comparable";
  if (a.info().tokens() != b.info().tokens()) msg += " (they hold " + TokensText(a) + " and " + TokensText(b) + " tokens)";
  return msg;
}

int RunDiff(const DiffArgs& args) {
  kvstore::PromptCacheReader::Options open;
  open.prefetch = true;
  auto a = kvstore::PromptCacheReader::Open(kvstore::Env::Default(), args.a, open);
  if (!a.ok()) return Fail(a.status());
  auto b = kvstore::PromptCacheReader::Open(kvstore::Env::Default(), args.b, open);
  if (!b.ok()) return Fail(b.status());
  const size_t layers = std::min((*a)->num_layers(), (*b)->num_layers());
  Json rows = Json::MakeArray();
  if (!args.json) {
    std::printf("%-5s %-20s %-20s %12s %12s  %s\n", "layer", "class A", "class B", "max_abs", "mean_abs", "note");
  }
  double worst = 0;
  uint64_t identical = 0, incomparable = 0;
  bool over = false;
  for (size_t i = 0; i < layers; ++i) {
    auto la = (*a)->ReadLayer(i);
    if (!la.ok()) return Fail(la.status());
    auto lb = (*b)->ReadLayer(i);
    if (!lb.ok()) return Fail(lb.status());
    auto d = kvstore::DiffLayers(*la, *lb);
    if (!d.ok()) return Fail(d.status());
    over = over || (args.max_error && d->max_abs_error > *args.max_error);
    worst = std::max(worst, d->max_abs_error);
    identical += d->identical;
    incomparable += !d->comparable;
    // A layer that does not line up has no error figures: none was measured.
    const auto figure = [&](double v) { return d->comparable ? Json(v) : Json(); };
    if (args.json) {
      Json r = Json::MakeObject();
      r["index"] = Json(static_cast<int64_t>(i));
      r["class_a"] = Json(d->class_a);
      r["class_b"] = Json(d->class_b);
      r["comparable"] = Json(d->comparable);
      r["identical"] = Json(d->identical);
      r["same_meta_state"] = Json(d->same_meta);
      r["values"] = d->comparable ? Json(d->values) : Json();
      r["max_abs_error"] = figure(d->max_abs_error);
      r["mean_abs_error"] = figure(d->mean_abs_error);
      if (!d->comparable) r["mismatch"] = Json(d->mismatch);
      rows.Push(std::move(r));
    } else {
      const std::string note = !d->comparable ? "not comparable: " + d->mismatch
                               : d->identical ? "identical"
                               : !d->same_meta ? "meta state differs" : "";
      char max_abs[32] = "-", mean_abs[32] = "-";
      if (d->comparable) {
        std::snprintf(max_abs, sizeof(max_abs), "%.6g", d->max_abs_error);
        std::snprintf(mean_abs, sizeof(mean_abs), "%.6g", d->mean_abs_error);
      }
      std::printf("%-5zu %-20s %-20s %12s %12s  %s\n", i, TerminalText(d->class_a).c_str(),
                  TerminalText(d->class_b).c_str(), max_abs, mean_abs, TerminalText(note).c_str());
    }
  }
  const bool comparable = incomparable == 0 && (*a)->num_layers() == (*b)->num_layers();
  const bool measured = incomparable < layers;  // some layer has error figures
  if (args.json) {
    Json out = Json::MakeObject();
    out["a"] = Json(args.a);
    out["b"] = Json(args.b);
    out["layers_a"] = Json(static_cast<int64_t>((*a)->num_layers()));
    out["layers_b"] = Json(static_cast<int64_t>((*b)->num_layers()));
    out["tokens_a"] = (*a)->info().tokens() ? Json(*(*a)->info().tokens()) : Json();
    out["tokens_b"] = (*b)->info().tokens() ? Json(*(*b)->info().tokens()) : Json();
    out["comparable"] = Json(comparable);
    out["identical_layers"] = Json(identical);
    out["not_comparable_layers"] = Json(incomparable);
    out["max_abs_error"] = measured ? Json(worst) : Json();
    out["layers"] = std::move(rows);
    PrintJson(out);
  } else {
    std::printf("%zu layers compared, %llu identical", layers, static_cast<unsigned long long>(identical));
    if (incomparable > 0) std::printf(", %llu not comparable", static_cast<unsigned long long>(incomparable));
    if (measured) std::printf(", max abs error %.6g", worst);
    std::printf("\n");
  }
  if (!comparable) return Fail(kExitCorruption, NotComparableMessage(args, **a, **b, layers, incomparable));
  if (over) return Fail(kExitCorruption, "the caches differ beyond --max-error");
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
