#include "kvstore/cache_state.h"

namespace kvstore {

size_t CacheState::nbytes() const {
  if (is_array()) return array().nbytes();
  if (!is_list()) return 0;
  size_t total = 0;
  for (const CacheState& item : list()) total += item.nbytes();
  return total;
}

std::string CacheState::DebugString() const {
  if (is_none()) return "None";
  if (is_bool()) return bool_value() ? "True" : "False";
  if (is_int()) return std::to_string(int_value());
  if (is_string()) return "'" + str() + "'";
  return is_array() ? "array" : "list";
}

MetaState MetaState::Strings(const std::vector<std::string>& items) {
  List list;
  list.reserve(items.size());
  for (const std::string& s : items) list.emplace_back(s);
  return MetaState(std::move(list));
}

bool MetaState::truthy() const { return is_string() ? !str().empty() : !list().empty(); }

std::string MetaState::DebugString() const {
  if (is_string()) {
    std::string out = "'";
    out += str();
    out += "'";
    return out;
  }
  std::string out = "[";
  for (size_t i = 0; i < list().size(); ++i) {
    if (i > 0) out += ", ";
    out += list()[i].DebugString();
  }
  out += "]";
  return out;
}

}  // namespace kvstore
