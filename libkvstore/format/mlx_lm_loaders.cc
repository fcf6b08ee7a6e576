// Which mlx-lm releases load a prompt-cache file, and what the loader of the
// other layout would silently get wrong (docs/compat.md, "Which mlx-lm loads
// a file"). Both loaders unflatten the metadata into a list of three groups
// without checking it:
//   <= 0.31: [meta states "0.*", user "1.*", class names "2.*"], and zip()s
//            the class names with the tensor layers and the meta states;
//   >= 0.32: [user "0.*", class names "1.*", scalar list "2.*"].
// A missing group becomes {}, and zip() over {} yields nothing: the file
// loads as [] instead of failing.
#include <algorithm>

#include "libkvstore/format/layout.h"

namespace kvstore {
namespace {

bool HasKeyUnder(const Metadata& m, std::string_view prefix) {
  for (const auto& [k, v] : m) {
    if (k.starts_with(prefix)) return true;
  }
  return false;
}

bool HasArraysCache(const ParsedLayer& l) {
  if (l.class_name == "ArraysCache" || l.class_name == "MambaCache") return true;
  for (const ParsedLayer& c : l.children) {
    if (HasArraysCache(c)) return true;
  }
  return false;
}

}  // namespace

void DescribeMlxLmLoaders(const ParsedFile& parsed, const SafetensorsHeader& header, PromptCacheInfo& info) {
  const bool loadable = info.valid() && info.unsupported.empty() &&
                        std::all_of(info.layers.begin(), info.layers.end(),
                                    [](const LayerInfo& l) { return l.unsupported.empty(); });
  const size_t layers = parsed.layers.size();
  switch (parsed.layout) {
    case PromptCacheLayout::kMlxLm032:
      info.loads_in_mlx_lm_032 = loadable;
      // The old loader takes the user metadata for the meta states.
      if (layers > 0 && !HasKeyUnder(header.metadata, "0.")) {
        info.mlx_lm_warnings.push_back(
            "mlx-lm <= 0.31 would load this file as an empty cache, without an error (no user metadata)");
      }
      break;
    case PromptCacheLayout::kMlxLm:
    case PromptCacheLayout::kMlxLm031: {
      const bool padding_layout = parsed.layout == PromptCacheLayout::kMlxLm &&
                                  std::any_of(parsed.layers.begin(), parsed.layers.end(), HasArraysCache);
      info.loads_in_mlx_lm_031 = loadable && !padding_layout;
      if (padding_layout) {
        info.mlx_lm_warnings.push_back(
            "mlx-lm 0.31 would misread its ArraysCache layers (it takes [slots, left_padding, lengths] for the "
            "slots); only mlx-lm between 0.31 and 0.32 reads this layout");
      }
      // The new loader takes the (empty) user metadata for the class names.
      if (layers == 1 && !HasKeyUnder(header.metadata, "1.")) {
        info.mlx_lm_warnings.push_back(
            "mlx-lm >= 0.32 would load this file as an empty cache, without an error (one layer, no user "
            "metadata)");
      }
      break;
    }
    case PromptCacheLayout::kMlxLmLegacy:
    case PromptCacheLayout::kMlxSwiftLm:
      break;
  }
}

std::string PromptCacheInfo::mlx_lm_versions() const {
  if (loads_in_mlx_lm_031 && loads_in_mlx_lm_032) return "any";
  if (loads_in_mlx_lm_031) return "<= 0.31";
  if (loads_in_mlx_lm_032) return ">= 0.32";
  return "neither";
}

}  // namespace kvstore
