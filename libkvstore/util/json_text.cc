// Json to and from text through nlohmann-json, the only file that uses it.
//
// Parsing runs nlohmann's SAX parser (strict: one value, nothing after it)
// with a handler that builds our Json, so that:
// - objects keep their members in file order; a duplicate key is found
//   through a set per open object (a comparison with the previous key while
//   the keys come sorted, a linear scan while the object is small, else a
//   table keyed with a per-process secret, json_key_index.h);
// - integers stay exact (number_integer / number_unsigned), others are doubles;
// - nothing throws: nlohmann reports errors through parse_error(), and the
//   handler stops the parser by returning false on the errors it finds itself.
// Decisions where nlohmann alone would differ from the rules in json.h:
// - a UTF-8 byte order mark, which nlohmann skips, and a partial one, which
//   it names as a bad BOM, are refused up front like any other first byte
//   that cannot start a value;
// - nesting depth is checked in the handler (the SAX parser is iterative and
//   has no limit of its own), at the offset of the bracket that is too deep;
// - an error's offset is the 0-based offset of the byte at which it was
//   detected: the offending byte of a malformed token, the last byte of an
//   unexpected one (nlohmann counts the bytes read, one more), the first byte
//   of a number out of range;
// - the handler does not see positions, so the input is read through an
//   iterator that publishes how far the lexer has read; a duplicate key is
//   reported at its opening quote, found from the end of the previous token;
// - numbers whose magnitude is below the smallest double parse as 0 (as in
//   nlohmann, Python and mlx-lm), numbers beyond the largest are an error;
// - a NUL byte, which nlohmann's lexer takes for the end of the input, is an
//   error wherever it is (after the value too);
// - error messages keep nlohmann's description but never echo input bytes.
//
// Dump() converts to nlohmann::ordered_json and calls its dump(), so the bytes
// are exactly what mlx-lm's nlohmann writes. Members are appended to the
// ordered map's vector directly: its emplace() searches linearly for the key,
// which is quadratic on a header with 40,000 members.
#include "libkvstore/util/json_text.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>
#include <vector>

#include "kvstore/json.h"
#include "libkvstore/util/json_key_index.h"
#include "libkvstore/util/tracked_iterator.h"

namespace kvstore {
namespace {

using NJson = nlohmann::ordered_json;

// Unsorted objects up to this many members are checked for duplicates by a scan.
constexpr size_t kScanLimit = 8;
constexpr size_t kFirstCapacity = 4;

// Builds a Json from nlohmann's SAX events (the interface nlohmann calls).
// Every value is constructed where it ends up: an object member when its
// value arrives (the key waits in key_), an array element at the back.
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
    bool sorted = true;              // an object's keys so far are in increasing order
    std::unique_ptr<KeyIndex> keys;  // built once an unsorted object outgrows kScanLimit
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
  std::string key_;        // the key of the member whose value comes next
  uint32_t key_hash_ = 0;  // its hash, when its object has a KeyIndex
  size_t mark_ = 0;        // bytes read when the previous token ended
  Status error_;
};

template <typename... Args>
Json& JsonBuilder::Emplace(Args&&... args) {
  if (open_.empty()) {
    root_ = Json(std::forward<Args>(args)...);
    return root_;
  }
  // A container's vector does not grow while one of its elements is open,
  // so the pointers in open_ stay valid.
  // A container's first element reserves kFirstCapacity: one allocation for a
  // tensor entry (3 members), its shape (up to 4 dims) or data_offsets (2)
  // instead of up to three. At worst (one element each) that is 2.5 times
  // the memory plain growth takes, still bounded by the input's size.
  OpenContainer& top = open_.back();
  if (top.array != nullptr) {
    if (top.array->empty()) top.array->reserve(kFirstCapacity);
    return top.array->emplace_back(std::forward<Args>(args)...);
  }
  if (top.object->empty()) top.object->reserve(kFirstCapacity);
  if (top.keys) top.keys->Add(static_cast<uint32_t>(top.object->size()), key_hash_);
  return top.object
      ->emplace_back(std::piecewise_construct, std::forward_as_tuple(std::move(key_)),
                     std::forward_as_tuple(std::forward<Args>(args)...))
      .second;
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
  key_ = std::move(key);
  if (open_.back().object->size() >= KeyIndex::kMaxMembers) {
    return Fail("object with too many members", Consumed());
  }
  if (options_.reject_duplicate_keys && IsDuplicate(open_.back())) {
    std::string what = "duplicate key ";
    AppendJsonString(what, key_.size() <= 64 ? key_ : key_.substr(0, 64) + "...");
    // Only whitespace and ',' lie between the previous token and the key.
    return Fail(what, std::min(text_.find('"', mark_), Consumed()));
  }
  mark_ = Consumed();
  return true;
}

bool JsonBuilder::IsDuplicate(OpenContainer& object) {
  const Json::Object& members = *object.object;
  if (!object.keys) {
    // Keys in increasing order cannot repeat. nlohmann's std::map, and so
    // MLX and our writer, write safetensors headers that way.
    if (object.sorted && (members.empty() || members.back().first < key_)) return false;
    object.sorted = false;
    if (members.size() < kScanLimit) {
      for (const Json::Member& m : members) {
        if (m.first == key_) return true;
      }
      return false;
    }
    object.keys = std::make_unique<KeyIndex>(&members);
    for (size_t i = 0; i < members.size(); ++i) {
      object.keys->Add(static_cast<uint32_t>(i), object.keys->Hash(members[i].first));
    }
  }
  key_hash_ = object.keys->Hash(key_);
  return object.keys->Contains(key_, key_hash_);
}

bool JsonBuilder::parse_error(size_t position, const std::string& last_token,
                              const nlohmann::json::exception& error) {
  // what() is "[json.exception.<kind>.<id>] parse error at line L, column C:
  // <description>; last read: '<input bytes>'...": keep the description.
  std::string_view what = error.what();
  if (size_t colon = what.find(": "); colon != std::string_view::npos) {
    what.remove_prefix(colon + 2);
  }
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
  if (error_.ok()) {
    error_ =
        Status::Corruption("JSON: " + std::string(what) + " at byte " + std::to_string(offset));
  }
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
    case Json::Type::kNull:
      return nullptr;
    case Json::Type::kBool:
      return j.as_bool();
    case Json::Type::kInt:
      return j.as_int();
    case Json::Type::kUint:
      return j.as_uint();
    case Json::Type::kDouble:
      return j.as_double();
    case Json::Type::kString:
      return j.as_string();
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
      if (sort_keys) {
        std::stable_sort(
            order.begin(), order.end(),
            [](const Json::Member* a, const Json::Member* b) { return a->first < b->first; });
      }
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
