#include "libkvstore/remote/redis_slots.h"

#include <array>
#include <charconv>

namespace kvstore {
namespace {

constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

// Hosts from a server go into connect() and messages: names and addresses
// only, of a sane length.
bool IsPlausibleHost(std::string_view host) {
  if (host.size() > 253) return false;
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == ':' || c == '_';
    if (!ok) return false;
  }
  return true;
}

Status Bad(size_t index, std::string_view what) {
  return Status::Corruption("CLUSTER SLOTS[" + std::to_string(index) + "]: " + std::string(what));
}

}  // namespace

uint16_t Crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (char c : bytes) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ static_cast<uint8_t>(c)) & 0xff]);
  }
  return crc;
}

int KeyHashSlot(std::string_view key) {
  size_t open = key.find('{');
  if (open != std::string_view::npos) {
    size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) & (kRedisClusterSlots - 1);
}

Result<std::vector<RedisSlotRange>> ParseClusterSlots(const RedisReply& reply,
                                                      std::string_view asked_host) {
  using Type = RedisReply::Type;
  if (reply.type != Type::kArray) {
    return Status::Corruption("CLUSTER SLOTS: " + std::string(reply.type_name()) + " reply, not an array");
  }
  std::vector<RedisSlotRange> out;
  for (size_t i = 0; i < reply.elements.size(); ++i) {
    const RedisReply& e = reply.elements[i];
    if (e.type != Type::kArray || e.elements.size() < 3) {
      return Bad(i, "not [first, last, master, ...]");
    }
    const RedisReply& first = e.elements[0];
    const RedisReply& last = e.elements[1];
    const RedisReply& master = e.elements[2];
    if (first.type != Type::kInteger || last.type != Type::kInteger) return Bad(i, "slots are not integers");
    if (first.integer < 0 || last.integer >= kRedisClusterSlots || first.integer > last.integer) {
      return Bad(i, "slot range " + std::to_string(first.integer) + ".." + std::to_string(last.integer) +
                        " is not within 0..16383 in order");
    }
    if (master.type != Type::kArray || master.elements.size() < 2 ||
        master.elements[0].type != Type::kString || master.elements[1].type != Type::kInteger) {
      return Bad(i, "master is not [host, port, ...]");
    }
    std::string_view host = master.elements[0].str;
    int64_t port = master.elements[1].integer;
    if (host == "?") continue;  // endpoint unknown: the slots stay unrouted
    if (host.empty()) host = asked_host;
    if (!IsPlausibleHost(host)) return Bad(i, "master host is not a host name or address");
    if (port < 1 || port > 65535) return Bad(i, "master port " + std::to_string(port) + " is not in 1..65535");
    out.push_back({static_cast<int>(first.integer), static_cast<int>(last.integer), std::string(host),
                   static_cast<uint16_t>(port)});
  }
  return out;
}

std::optional<RedisRedirect> ParseRedirect(const RedisReply& reply, std::string_view asked_host) {
  std::string_view code = reply.error_code();
  if (code != "MOVED" && code != "ASK") return std::nullopt;
  std::string_view rest = std::string_view(reply.str).substr(code.size());
  if (!rest.starts_with(' ')) return std::nullopt;
  rest.remove_prefix(1);
  size_t space = rest.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::string_view slot_text = rest.substr(0, space), endpoint = rest.substr(space + 1);
  size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = endpoint.substr(0, colon), port_text = endpoint.substr(colon + 1);

  RedisRedirect out;
  out.ask = code == "ASK";
  unsigned port = 0;
  auto s = std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), out.slot);
  auto p = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (s.ec != std::errc() || s.ptr != slot_text.data() + slot_text.size() || out.slot < 0 ||
      out.slot >= kRedisClusterSlots || p.ec != std::errc() ||
      p.ptr != port_text.data() + port_text.size() || port == 0 || port > 65535) {
    return std::nullopt;
  }
  if (host.empty()) host = asked_host;
  if (!IsPlausibleHost(host)) return std::nullopt;
  out.host = std::string(host);
  out.port = static_cast<uint16_t>(port);
  return out;
}

}  // namespace kvstore
