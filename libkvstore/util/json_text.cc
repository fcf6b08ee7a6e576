// Json to and from text through nlohmann-json, the only file that uses it.
//
// Parsing runs nlohmann's SAX parser (strict: one value, nothing after it)
// with a handler that builds our Json: members in file order, integers exact
// (number_integer / number_unsigned), other numbers doubles. Nothing throws:
// nlohmann reports its errors through parse_error(), and the handler stops
// the parser by returning false on those it finds itself. Where nlohmann
// alone would differ from the rules in json.h:
// - duplicate keys: compared with the previous key while keys come sorted,
//   by a scan while the object is small, else in a KeySet;
// - a byte order mark (nlohmann skips it; a partial one it names as a bad
//   BOM) is refused up front like any first byte that cannot start a value;
// - nesting depth is checked in the handler (the SAX parser has no limit);
// - an error names the 0-based offset of the byte where it was detected: the
//   offending byte of a malformed token, the last byte of an unexpected one
//   (nlohmann counts one more), the first byte of a number out of range, a
//   duplicate key's opening quote. The handler sees no positions, so the
//   input is read through an iterator that publishes how far the lexer is;
// - numbers below the smallest double parse as 0 (as in nlohmann, Python
//   and mlx-lm), numbers beyond the largest are an error;
// - a NUL byte (nlohmann's lexer takes it for the end) is an error anywhere;
// - messages keep nlohmann's description but never echo input bytes.
// Dump() converts to nlohmann::ordered_json and calls its dump(): the bytes
// mlx-lm's nlohmann writes. Members are appended to the ordered map's vector
// directly (its emplace() searches for the key: quadratic on 40,000 members).
#include "libkvstore/util/json_text.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "kvstore/json.h"

namespace kvstore {
namespace {

using NJson = nlohmann::ordered_json;

// Unsorted objects up to this many members are checked for duplicates by a scan.
constexpr size_t kScanLimit = 8;
constexpr size_t kFirstCapacity = 4;

// An input iterator whose copies share one position, so the parser sees
// how far nlohmann's lexer (which takes its iterator by value) has read.
class TrackedIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using reference = const char&;
  explicit TrackedIterator(const char** cursor) : cursor_(cursor) {}
  explicit TrackedIterator(const char* end) : end_(end) {}
  reference operator*() const { return **cursor_; }
  TrackedIterator& operator++() { return ++*cursor_, *this; }
  bool operator==(const TrackedIterator& other) const { return get() == other.get(); }

 private:
  const char* get() const { return cursor_ != nullptr ? *cursor_ : end_; }
  const char** cursor_ = nullptr;
  const char* end_ = nullptr;
};

// The keys of a large unsorted object: member indices in an open-addressing
// table at most half full, hashed with std::hash. Its seed is fixed, so a
// hostile file can make keys collide: once a probe passes kMaxProbe slots,
// the object moves to an ordered set of its keys. A key costs at most
// O(length x (kMaxProbe + log members)), whatever the file.
class KeySet {
 public:
  explicit KeySet(const Json::Object* members) : members_(members) {}
  // Indexes member `i` (every member before it is indexed); false when one
  // of them has its key.
  bool Insert(uint32_t i) {
    if (ordered_) return ordered_->emplace(Key(i)).second;
    if (2 * (size_t{i} + 1) > slots_.size()) Grow();
    const uint32_t hash = static_cast<uint32_t>(std::hash<std::string_view>()(Key(i)));
    for (size_t s = hash & (slots_.size() - 1), probes = 0;; s = (s + 1) & (slots_.size() - 1)) {
      if (++probes > kMaxProbe) {
        ordered_.emplace();
        for (uint32_t j = 0; j <= i; ++j) ordered_->emplace(Key(j));
        slots_ = {};
        return ordered_->size() == i + 1;
      }
      if (slots_[s].index == kEmpty) return slots_[s] = {hash, i}, true;
      if (slots_[s].hash == hash && Key(slots_[s].index) == Key(i)) return false;
    }
  }

 private:
  struct Slot { uint32_t hash, index; };
  static constexpr uint32_t kEmpty = UINT32_MAX;
  static constexpr size_t kMaxProbe = 32;  // random keys at half load: practically never

  std::string_view Key(uint32_t i) const { return (*members_)[i].first; }
  void Grow() {
    std::vector<Slot> old(std::max<size_t>(64, 2 * slots_.size()), Slot{0, kEmpty});
    old.swap(slots_);
    for (const Slot& slot : old) {
      if (slot.index == kEmpty) continue;
      size_t s = slot.hash & (slots_.size() - 1);
      while (slots_[s].index != kEmpty) s = (s + 1) & (slots_.size() - 1);
      slots_[s] = slot;
    }
  }

  const Json::Object* members_;
  std::vector<Slot> slots_;
  std::optional<std::set<std::string>> ordered_;  // copies of the keys
};

// Builds a Json from nlohmann's SAX events (the interface nlohmann calls).
// Every value is constructed where it ends up: an array element at the
// back, an object member's in the member its key appended.
class JsonBuilder {
 public:
  JsonBuilder(std::string_view text, const char* const* cursor, const Json::ParseOptions& options)
      : text_(text), cursor_(cursor), options_(options) {}

  bool null() { return Put(); }
  bool boolean(bool value) { return Put(value); }
  bool number_integer(int64_t value) { return Put(value); }
  bool number_unsigned(uint64_t value) { return Put(value); }
  bool number_float(double value, const std::string& /*text*/) { return Put(value); }
  bool string(std::string& value) { return Put(std::move(value)); }
  bool binary(NJson::binary_t& /*value*/) { return Fail("binary value", Consumed()); }
  bool start_object(size_t /*elements*/) { return Open(false); }
  bool start_array(size_t /*elements*/) { return Open(true); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(std::string& key);
  bool parse_error(size_t position, const std::string& last_token,
                   const nlohmann::json::exception& error);

  Result<Json> Finish(bool parsed);

 private:
  struct OpenContainer {
    Json::Array* array = nullptr;  // exactly one of the two is set
    Json::Object* object = nullptr;
    bool sorted = true;            // an object's keys so far are in increasing order
    std::unique_ptr<KeySet> keys;  // built once an unsorted object outgrows kScanLimit
  };

  size_t Consumed() const { return static_cast<size_t>(*cursor_ - text_.data()); }
  bool Fail(std::string_view what, size_t offset);
  // Constructs Json(args...) where the innermost open container expects it.
  template <typename... Args>
  Json& Emplace(Args&&... args);
  template <typename... Args>
  bool Put(Args&&... args) {
    Emplace(std::forward<Args>(args)...);
    mark_ = Consumed();
    return true;
  }
  bool Open(bool array);
  bool Close() {
    open_.pop_back();
    mark_ = Consumed();
    return true;
  }
  bool IsDuplicate(OpenContainer& object);

  std::string_view text_;
  const char* const* cursor_;
  const Json::ParseOptions& options_;
  Json root_;
  std::vector<OpenContainer> open_;
  size_t mark_ = 0;  // bytes read when the previous token ended
  Status error_;
};

template <typename... Args>
Json& JsonBuilder::Emplace(Args&&... args) {
  if (open_.empty()) {
    root_ = Json(std::forward<Args>(args)...);
    return root_;
  }
  // A container's vector does not grow while one of its elements is open,
  // so the pointers in open_ stay valid. Its first element reserves
  // kFirstCapacity: one allocation for a tensor entry (3 members), its shape
  // or data_offsets, instead of up to three (at worst 2.5 times the memory).
  OpenContainer& top = open_.back();
  if (top.array != nullptr) {
    if (top.array->empty()) top.array->reserve(kFirstCapacity);
    return top.array->emplace_back(std::forward<Args>(args)...);
  }
  return top.object->back().second = Json(std::forward<Args>(args)...);
}

bool JsonBuilder::Open(bool array) {
  const size_t bracket = Consumed() - 1;
  if (open_.size() >= options_.max_depth) return Fail("nesting deeper than the limit", bracket);
  OpenContainer open;
  if (array) {
    open.array = &Emplace(Json::Array()).as_array();
  } else {
    open.object = &Emplace(Json::Object()).as_object();
  }
  open_.push_back(std::move(open));
  mark_ = Consumed();
  return true;
}

bool JsonBuilder::key(std::string& key) {
  OpenContainer& top = open_.back();
  if (top.object->size() >= UINT32_MAX) return Fail("object with too many members", Consumed());
  if (top.object->empty()) top.object->reserve(kFirstCapacity);
  top.object->emplace_back(std::move(key), Json());
  if (options_.reject_duplicate_keys && IsDuplicate(top)) {
    const std::string& name = top.object->back().first;
    std::string what = "duplicate key ";
    AppendJsonString(what, name.size() <= 64 ? name : name.substr(0, 64) + "...");
    // Only whitespace and ',' lie between the previous token and the key.
    return Fail(what, std::min(text_.find('"', mark_), Consumed()));
  }
  mark_ = Consumed();
  return true;
}

// Whether the member just appended repeats a key of `object`.
bool JsonBuilder::IsDuplicate(OpenContainer& object) {
  const Json::Object& members = *object.object;
  const size_t n = members.size() - 1;  // the new member's index
  const std::string& key = members[n].first;
  // Keys in increasing order cannot repeat. nlohmann's std::map, and so
  // MLX and our writer, write safetensors headers that way.
  if (object.sorted && (n == 0 || members[n - 1].first < key)) return false;
  object.sorted = false;
  if (!object.keys) {
    if (n < kScanLimit) {
      return std::any_of(members.begin(), members.end() - 1,
                         [&](const Json::Member& m) { return m.first == key; });
    }
    object.keys = std::make_unique<KeySet>(&members);
    for (uint32_t i = 0; i < n; ++i) object.keys->Insert(i);
  }
  return !object.keys->Insert(static_cast<uint32_t>(n));
}

bool JsonBuilder::parse_error(size_t position, const std::string& last_token,
                              const nlohmann::json::exception& error) {
  // what() is "[json.exception.<kind>.<id>] parse error at line L, column C:
  // <description>; last read: '<input bytes>'...": keep the description.
  std::string_view what = error.what();
  if (size_t colon = what.find(": "); colon != what.npos) what.remove_prefix(colon + 2);
  what = what.substr(0, what.find("; last read: "));
  size_t offset = std::min(position > 0 ? position - 1 : 0, text_.size());
  if (error.id == 406) {  // its text quotes the number; point at the number's first byte
    what = "number out of range";
    offset = position - std::min(position, last_token.size());
  }
  // The lexer takes a NUL byte for the end of the input.
  if (offset < text_.size() && text_[offset] == '\0') what = "unexpected NUL byte";
  return Fail(what, offset);
}

bool JsonBuilder::Fail(std::string_view what, size_t offset) {
  const std::string message = "JSON: " + std::string(what) + " at byte " + std::to_string(offset);
  if (error_.ok()) error_ = Status::Corruption(message);
  return false;
}

Result<Json> JsonBuilder::Finish(bool parsed) {
  // The lexer stops at a NUL byte as at the end of the input.
  const size_t read = Consumed();
  if (parsed && read > 0 && text_[read - 1] == '\0') {
    Fail("unexpected NUL byte after the JSON value", read - 1);
  }
  if (!error_.ok()) return error_;
  if (!parsed) return Status::Corruption("JSON: parse failed");  // every failure names itself above
  return std::move(root_);
}

NJson ToNlohmann(const Json& j, bool sort_keys) {
  switch (j.type()) {
    case Json::Type::kNull: return nullptr;
    case Json::Type::kBool: return j.as_bool();
    case Json::Type::kInt: return j.as_int();
    case Json::Type::kUint: return j.as_uint();
    case Json::Type::kDouble: return j.as_double();
    case Json::Type::kString: return j.as_string();
    case Json::Type::kArray: {
      NJson out = NJson::array();
      auto& items = out.get_ref<NJson::array_t&>();
      items.reserve(j.size());
      for (const Json& item : j.as_array()) items.push_back(ToNlohmann(item, sort_keys));
      return out;
    }
    case Json::Type::kObject: {
      std::vector<const Json::Member*> order;
      order.reserve(j.size());
      for (const Json::Member& m : j.as_object()) order.push_back(&m);
      auto by_key = [](const auto* x, const auto* y) { return x->first < y->first; };
      if (sort_keys) std::stable_sort(order.begin(), order.end(), by_key);
      NJson out = NJson::object();
      // The ordered map's underlying vector: append without the key search.
      auto& members = static_cast<NJson::object_t::Container&>(out.get_ref<NJson::object_t&>());
      members.reserve(order.size());
      for (const Json::Member* m : order)
        members.emplace_back(m->first, ToNlohmann(m->second, sort_keys));
      return out;
    }
  }
  return nullptr;
}

}  // namespace

Result<Json> Json::Parse(std::string_view text, const ParseOptions& options) {
  // nlohmann skips a byte order mark and names a partial one: neither is JSON.
  if (text.starts_with('\xEF')) {
    return Status::Corruption(text.starts_with("\xEF\xBB\xBF")
                                  ? "JSON: unexpected byte order mark at byte 0"
                                  : "JSON: invalid value at byte 0");
  }
  const char* cursor = text.data();
  JsonBuilder builder(text, &cursor, options);
  const bool parsed = nlohmann::json::sax_parse(
      TrackedIterator(&cursor), TrackedIterator(text.data() + text.size()), &builder,
      nlohmann::json::input_format_t::json, /*strict=*/true);
  return builder.Finish(parsed);
}

std::string Json::Dump(const DumpOptions& options) const {
  return ToNlohmann(*this, options.sort_keys)
      .dump(options.indent, ' ', /*ensure_ascii=*/false, NJson::error_handler_t::replace);
}

void AppendJsonString(std::string& out, std::string_view s) {
  out += NJson(s).dump(-1, ' ', /*ensure_ascii=*/false, NJson::error_handler_t::replace);
}

}  // namespace kvstore
