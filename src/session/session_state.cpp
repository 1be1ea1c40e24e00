// Session::save_state / load_state: the session state file, format version 1 (docs/session-state.md).
//
// A header (magic, version, model fingerprint, shapes, backend and model names) protected by its own
// checksum, then the payload (tokens, last logits, cache rows, indexer keys, host data) and the
// payload's checksum. Loading checks the header completely before reading the payload, reads the
// payload into fresh buffers while hashing it, and swaps them in only when everything matched, so a
// failed load leaves the session as it was.
#include "core/stream_hash.hpp"
#include "session/session_impl.hpp"

#include <latte/error.hpp>
#include <latte/quant.hpp>
#include <latte/session.hpp>

#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace latte {

namespace {

constexpr std::array<char, 8> kMagic = {'L', 'A', 'T', 'T', 'E', 'S', 'T', '\n'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kFixedHeaderBytes = 68;  // magic .. host_data_bytes, see docs/session-state.md
constexpr uint32_t kMaxBackendNameBytes = 256;
constexpr uint32_t kMaxModelNameBytes = 4096;
// Seeds keep the two checksums distinct even over equal bytes.
constexpr uint64_t kHeaderSeed = 0x4c4154544548ull;   // "LATTEH"
constexpr uint64_t kPayloadSeed = 0x4c4154544550ull;  // "LATTEP"

/// The fixed-size part of the header, in file order.
struct FixedHeader {
  uint32_t version = kFormatVersion;
  uint64_t fingerprint = 0;
  uint32_t n_vocab = 0;
  uint32_t n_layer = 0;
  uint32_t values_per_token = 0;
  uint32_t element_type = 0;  // ggml type id
  uint32_t indexer_dim = 0;
  uint32_t n_past = 0;
  uint32_t n_last = 0;
  uint32_t n_logit_rows = 0;
  uint32_t backend_name_bytes = 0;
  uint32_t model_name_bytes = 0;
  uint64_t host_data_bytes = 0;
};

std::string hex64(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016" PRIx64, v);
  return text;
}

// ---- byte encoding ----

template <class T>
void put(std::vector<std::byte>& out, T value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

template <class T>
T get(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

std::vector<std::byte> encode_header(const FixedHeader& h, std::string_view backend, std::string_view model_name) {
  std::vector<std::byte> out;
  out.reserve(kFixedHeaderBytes + backend.size() + model_name.size() + 8);
  for (char c : kMagic) out.push_back(static_cast<std::byte>(c));
  put(out, h.version);
  put(out, h.fingerprint);
  for (uint32_t v : {h.n_vocab, h.n_layer, h.values_per_token, h.element_type, h.indexer_dim, h.n_past, h.n_last,
                     h.n_logit_rows, h.backend_name_bytes, h.model_name_bytes}) {
    put(out, v);
  }
  put(out, h.host_data_bytes);
  const auto text = [&](std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out.insert(out.end(), p, p + s.size());
  };
  text(backend);
  text(model_name);
  put(out, detail::hash64_seeded(out, kHeaderSeed));
  return out;
}

FixedHeader decode_fixed_header(const std::byte* p) {
  FixedHeader h;
  h.version = get<uint32_t>(p + 8);
  h.fingerprint = get<uint64_t>(p + 12);
  h.n_vocab = get<uint32_t>(p + 20);
  h.n_layer = get<uint32_t>(p + 24);
  h.values_per_token = get<uint32_t>(p + 28);
  h.element_type = get<uint32_t>(p + 32);
  h.indexer_dim = get<uint32_t>(p + 36);
  h.n_past = get<uint32_t>(p + 40);
  h.n_last = get<uint32_t>(p + 44);
  h.n_logit_rows = get<uint32_t>(p + 48);
  h.backend_name_bytes = get<uint32_t>(p + 52);
  h.model_name_bytes = get<uint32_t>(p + 56);
  h.host_data_bytes = get<uint64_t>(p + 60);
  return h;
}

// ---- sinks and sources ----

/// Where save_state writes: a growing vector or a file.
class StateSink {
 public:
  virtual ~StateSink() = default;
  virtual void write(std::span<const std::byte> bytes) = 0;
};

class MemorySink final : public StateSink {
 public:
  explicit MemorySink(std::vector<std::byte>& out) : out_(out) {}
  void write(std::span<const std::byte> bytes) override { out_.insert(out_.end(), bytes.begin(), bytes.end()); }

 private:
  std::vector<std::byte>& out_;
};

std::string errno_text(int error) { return std::generic_category().message(error); }

class FileSink final : public StateSink {
 public:
  explicit FileSink(std::string path) : path_(std::move(path)), file_(std::fopen(path_.c_str(), "wb")) {
    if (!file_) throw Error(ErrorCode::io, "cannot create " + path_ + ": " + errno_text(errno));
  }
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;
  ~FileSink() override {
    if (file_) std::fclose(file_);
  }
  void write(std::span<const std::byte> bytes) override {
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
      throw Error(ErrorCode::io, "cannot write " + path_ + ": " + errno_text(errno));
    }
  }
  void close() {
    std::FILE* f = std::exchange(file_, nullptr);
    if (std::fflush(f) != 0 || std::fclose(f) != 0) {
      throw Error(ErrorCode::io, "cannot write " + path_ + ": " + errno_text(errno));
    }
  }

 private:
  std::string path_;
  std::FILE* file_;
};

/// Where load_state reads from: bytes in memory or a file, read front to back.
class StateSource {
 public:
  virtual ~StateSource() = default;
  [[nodiscard]] virtual uint64_t size() const = 0;
  /// Reads the next dst.size() bytes (the caller has checked that they exist).
  virtual void read(std::span<std::byte> dst) = 0;
};

class MemorySource final : public StateSource {
 public:
  explicit MemorySource(std::span<const std::byte> bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(std::span<std::byte> dst) override {
    if (dst.empty()) return;
    std::memcpy(dst.data(), bytes_.data() + position_, dst.size());
    position_ += dst.size();
  }

 private:
  std::span<const std::byte> bytes_;
  size_t position_ = 0;
};

class FileSource final : public StateSource {
 public:
  explicit FileSource(const std::string& path) : path_(path) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(status)) throw Error(ErrorCode::not_found, path + ": no such file");
    if (std::filesystem::is_directory(status)) throw Error(ErrorCode::io, path + " is a directory, not a state file");
    file_ = std::fopen(path.c_str(), "rb");
    if (!file_) throw Error(ErrorCode::io, "cannot open " + path + ": " + errno_text(errno));
    size_ = std::filesystem::file_size(path, ec);
    if (ec) {
      std::fclose(file_);
      throw Error(ErrorCode::io, "cannot read the size of " + path + ": " + ec.message());
    }
  }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  ~FileSource() override { std::fclose(file_); }
  uint64_t size() const override { return size_; }
  void read(std::span<std::byte> dst) override {
    if (!dst.empty() && std::fread(dst.data(), 1, dst.size(), file_) != dst.size()) {
      throw Error(ErrorCode::io,
                  "cannot read " + path_ + (std::ferror(file_) ? ": " + errno_text(errno) : ": it shrank"));
    }
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t size_ = 0;
};

// ---- save ----

// (Session::Impl is private to Session: these take it as a deduced type.)
void write_state(const auto& s, std::string_view host_data, StateSink& sink) {
  s.require_host_cache("save_state");
  const detail::KvCache& cache = s.cache;
  if (s.tokens.size() != static_cast<size_t>(cache.n_tokens())) {
    throw Error(ErrorCode::internal, "save_state: the session holds " + std::to_string(cache.n_tokens()) +
                                         " cached tokens but a history of " + std::to_string(s.tokens.size()));
  }
  const std::string& model_name = s.model.config().name;
  FixedHeader h;
  h.fingerprint = s.model.fingerprint();
  h.n_vocab = static_cast<uint32_t>(s.model.config().n_vocab);
  h.n_layer = static_cast<uint32_t>(cache.n_layer());
  h.values_per_token = static_cast<uint32_t>(cache.layout().values_per_token);
  h.element_type = static_cast<uint32_t>(cache.layout().element_type);
  h.indexer_dim = static_cast<uint32_t>(cache.indexer_dim());
  h.n_past = static_cast<uint32_t>(cache.n_tokens());
  h.n_last = static_cast<uint32_t>(s.n_last);
  h.n_logit_rows = s.n_last == 0 ? 0 : s.have_all_logits ? h.n_last : 1;
  h.backend_name_bytes = static_cast<uint32_t>(s.backend_name.size());
  h.model_name_bytes = static_cast<uint32_t>(std::min<size_t>(model_name.size(), kMaxModelNameBytes));
  h.host_data_bytes = host_data.size();
  sink.write(encode_header(h, s.backend_name, std::string_view(model_name).substr(0, h.model_name_bytes)));

  detail::StreamHash64 hash(kPayloadSeed);
  const auto emit = [&](const void* data, size_t bytes) {
    const std::span<const std::byte> span(static_cast<const std::byte*>(data), bytes);
    hash.update(span);
    sink.write(span);
  };
  const size_t n_past = h.n_past;
  emit(s.tokens.data(), n_past * sizeof(Token));
  const size_t n_vocab = h.n_vocab;
  emit(s.logits.data(), static_cast<size_t>(h.n_logit_rows) * n_vocab * sizeof(float));
  for (int il = 0; il < cache.n_layer(); ++il)
    emit(cache.attention_rows(il), n_past * cache.layout().bytes_per_token());
  for (int il = 0; il < cache.n_layer() && h.indexer_dim > 0; ++il) {
    emit(cache.indexer_keys(il), n_past * h.indexer_dim * sizeof(float));
  }
  emit(host_data.data(), host_data.size());
  const uint64_t checksum = hash.digest();
  sink.write(std::as_bytes(std::span(&checksum, 1)));
}

// ---- load ----

/// Reads and checks one state, then installs it into `s`; throws before touching `s`.
std::string read_state(auto& s, StateSource& source, const std::string& name) {
  s.require_host_cache("load_state");
  const auto fail = [&](const std::string& what) -> Error {
    return Error(ErrorCode::invalid_file, name + ": " + what);
  };
  const uint64_t file_size = source.size();
  std::array<std::byte, kFixedHeaderBytes> fixed{};
  if (file_size < kMagic.size()) {
    throw fail("not a latte session state: " + std::to_string(file_size) + " bytes, shorter than the magic");
  }
  const size_t fixed_bytes = static_cast<size_t>(std::min<uint64_t>(file_size, kFixedHeaderBytes));
  source.read(std::span(fixed).first(fixed_bytes));
  if (std::memcmp(fixed.data(), kMagic.data(), kMagic.size()) != 0) {
    throw fail("not a latte session state (the first 8 bytes are not \"LATTEST\\n\")");
  }
  if (fixed_bytes >= 12) {
    const auto version = get<uint32_t>(fixed.data() + 8);
    if (version != kFormatVersion) {
      throw fail("session state format version " + std::to_string(version) + " (byte offset 8); this build reads " +
                 "version " + std::to_string(kFormatVersion));
    }
  }
  if (fixed_bytes < kFixedHeaderBytes) {
    throw fail("truncated: " + std::to_string(file_size) + " bytes, the fixed header alone needs " +
               std::to_string(kFixedHeaderBytes));
  }
  const FixedHeader h = decode_fixed_header(fixed.data());
  if (h.backend_name_bytes > kMaxBackendNameBytes) {
    throw fail("corrupt header: backend name length " + std::to_string(h.backend_name_bytes) +
               " (byte offset 52) exceeds " + std::to_string(kMaxBackendNameBytes));
  }
  if (h.model_name_bytes > kMaxModelNameBytes) {
    throw fail("corrupt header: model name length " + std::to_string(h.model_name_bytes) +
               " (byte offset 56) exceeds " + std::to_string(kMaxModelNameBytes));
  }
  const uint64_t header_bytes = kFixedHeaderBytes + h.backend_name_bytes + h.model_name_bytes + 8;
  if (file_size < header_bytes) {
    throw fail("truncated: " + std::to_string(file_size) + " bytes, the header needs " + std::to_string(header_bytes));
  }
  std::vector<std::byte> header(fixed.begin(), fixed.end());
  header.resize(header_bytes);
  source.read(std::span(header).subspan(kFixedHeaderBytes));
  const uint64_t stored_header_sum = get<uint64_t>(header.data() + header_bytes - 8);
  if (detail::hash64_seeded(std::span(header).first(header_bytes - 8), kHeaderSeed) != stored_header_sum) {
    throw fail("corrupt header: its checksum does not match (the first " + std::to_string(header_bytes) +
               " bytes were altered)");
  }
  const auto text_at = [&](size_t offset, size_t bytes) {
    return std::string(reinterpret_cast<const char*>(header.data()) + offset, bytes);
  };
  const std::string backend = text_at(kFixedHeaderBytes, h.backend_name_bytes);
  const std::string model_name = text_at(kFixedHeaderBytes + h.backend_name_bytes, h.model_name_bytes);

  // The header is intact: does the state belong to this session's model and backend?
  const Model& model = s.model;
  if (h.fingerprint != model.fingerprint()) {
    throw fail("saved from another model ('" + model_name + "', fingerprint " + hex64(h.fingerprint) +
               "); this session runs '" + model.config().name + "' (fingerprint " + hex64(model.fingerprint()) + ")");
  }
  const detail::KvCache& cache = s.cache;
  const KvLayout& layout = cache.layout();
  const auto describe = [](const std::string& b, uint32_t layers, uint32_t values, uint32_t type, uint32_t idx) {
    const auto traits = find_type_traits(type);
    return "'" + b + "' (" + std::to_string(layers) + " layers x " + std::to_string(values) + " " +
           (traits ? std::string(traits->name) : "type#" + std::to_string(type)) + " values per token" +
           (idx ? ", indexer keys of " + std::to_string(idx) : std::string()) + ")";
  };
  if (backend != s.backend_name || h.n_layer != static_cast<uint32_t>(cache.n_layer()) ||
      h.values_per_token != static_cast<uint32_t>(layout.values_per_token) ||
      h.element_type != static_cast<uint32_t>(layout.element_type) ||
      h.indexer_dim != static_cast<uint32_t>(cache.indexer_dim())) {
    throw fail(
        "saved with attention backend " +
        describe(backend, h.n_layer, h.values_per_token, h.element_type, h.indexer_dim) + "; this session uses " +
        describe(s.backend_name, static_cast<uint32_t>(cache.n_layer()), static_cast<uint32_t>(layout.values_per_token),
                 static_cast<uint32_t>(layout.element_type), static_cast<uint32_t>(cache.indexer_dim())) +
        ": open the session with .attention = \"" + backend + "\"");
  }
  if (h.n_vocab != static_cast<uint32_t>(model.config().n_vocab)) {
    throw fail("corrupt header: vocabulary size " + std::to_string(h.n_vocab) + " for a model of " +
               std::to_string(model.config().n_vocab));
  }
  if (h.n_last > h.n_past) {
    throw fail("corrupt header: the last eval had " + std::to_string(h.n_last) + " tokens of only " +
               std::to_string(h.n_past));
  }
  if (!(h.n_logit_rows == (h.n_last == 0 ? 0u : 1u) || (h.n_last > 0 && h.n_logit_rows == h.n_last))) {
    throw fail("corrupt header: " + std::to_string(h.n_logit_rows) + " logit rows for a last eval of " +
               std::to_string(h.n_last) + " tokens");
  }
  if (h.n_past > static_cast<uint32_t>(s.params.n_ctx)) {
    throw Error(ErrorCode::context_overflow, name + ": the state holds " + std::to_string(h.n_past) +
                                                 " tokens, more than this session's n_ctx " +
                                                 std::to_string(s.params.n_ctx));
  }

  // Sizes from here on are bounded: n_past <= n_ctx (an int), the rest are this session's own.
  const uint64_t n_past = h.n_past;
  const uint64_t row_bytes = layout.bytes_per_token();
  const uint64_t logits_bytes = static_cast<uint64_t>(h.n_logit_rows) * h.n_vocab * sizeof(float);
  const uint64_t rows_bytes = h.n_layer * n_past * row_bytes;
  const uint64_t keys_bytes = h.n_layer * n_past * h.indexer_dim * sizeof(float);
  const uint64_t available = file_size - header_bytes;
  const uint64_t fixed_payload = n_past * sizeof(Token) + logits_bytes + rows_bytes + keys_bytes + 8;
  if (h.host_data_bytes > available || fixed_payload > available - h.host_data_bytes) {
    throw fail("truncated or corrupt: the header describes " + std::to_string(n_past) + " tokens and " +
               std::to_string(h.host_data_bytes) + " bytes of host data (" +
               (h.host_data_bytes > available
                    ? std::string("more than the file holds")
                    : std::to_string(header_bytes + fixed_payload + h.host_data_bytes) + " bytes in all") +
               "), the file has " + std::to_string(file_size) + " bytes");
  }
  if (fixed_payload + h.host_data_bytes < available) {
    throw fail(std::to_string(available - fixed_payload - h.host_data_bytes) +
               " unexpected bytes after the state's checksum (byte offset " +
               std::to_string(header_bytes + fixed_payload + h.host_data_bytes) + ")");
  }

  // Read the payload into fresh buffers, hashing as it comes.
  detail::StreamHash64 hash(kPayloadSeed);
  const auto take = [&](void* dst, uint64_t bytes) {
    const std::span<std::byte> span(static_cast<std::byte*>(dst), static_cast<size_t>(bytes));
    source.read(span);
    hash.update(span);
  };
  std::vector<Token> tokens(static_cast<size_t>(n_past));
  take(tokens.data(), n_past * sizeof(Token));
  std::vector<float> logits(static_cast<size_t>(h.n_logit_rows) * h.n_vocab);
  take(logits.data(), logits_bytes);
  detail::KvCache restored(cache.n_layer(), layout, cache.indexer_dim(), s.params.n_ctx);
  restored.reserve(static_cast<int>(n_past));
  for (int il = 0; il < restored.n_layer(); ++il) take(restored.attention_rows(il), n_past * row_bytes);
  for (int il = 0; il < restored.n_layer() && h.indexer_dim > 0; ++il) {
    take(restored.indexer_keys(il), n_past * h.indexer_dim * sizeof(float));
  }
  std::string host_data(static_cast<size_t>(h.host_data_bytes), '\0');
  take(host_data.data(), h.host_data_bytes);
  uint64_t stored_payload_sum = 0;
  source.read(std::as_writable_bytes(std::span(&stored_payload_sum, 1)));
  if (hash.digest() != stored_payload_sum) {
    throw fail("corrupt: the checksum of the " + std::to_string(fixed_payload - 8 + h.host_data_bytes) +
               " payload bytes after byte offset " + std::to_string(header_bytes) + " does not match");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= static_cast<Token>(h.n_vocab)) {
      throw fail("token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                 ", outside the vocabulary [0, " + std::to_string(h.n_vocab) + ")");
    }
  }

  // Everything checked: install it.
  restored.set_n_tokens(static_cast<int>(n_past));
  s.cache = std::move(restored);
  s.tokens = std::move(tokens);
  s.logits = std::move(logits);
  s.n_last = static_cast<int>(h.n_last);
  s.have_all_logits = h.n_last > 1 && h.n_logit_rows == h.n_last;
  return host_data;
}

}  // namespace

void Session::save_state(const std::string& path, std::string_view host_data) const {
  detail::ExclusiveUse::check_idle(impl_->in_use, "save_state");
  const std::string temporary = path + ".tmp";
  try {
    FileSink sink(temporary);
    write_state(*impl_, host_data, sink);
    sink.close();
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    throw Error(ErrorCode::io, "cannot write " + path + ": " + ec.message());
  }
}

std::vector<std::byte> Session::save_state_to_memory(std::string_view host_data) const {
  std::vector<std::byte> out;
  MemorySink sink(out);
  detail::ExclusiveUse::check_idle(impl_->in_use, "save_state");
  write_state(*impl_, host_data, sink);
  return out;
}

std::string Session::load_state(const std::string& path) {
  const detail::ExclusiveUse exclusive(impl_->in_use, "load_state");
  FileSource source(path);
  return read_state(*impl_, source, path);
}

std::string Session::load_state_from_memory(std::span<const std::byte> bytes, const std::string& name) {
  const detail::ExclusiveUse exclusive(impl_->in_use, "load_state");
  MemorySource source(bytes);
  return read_state(*impl_, source, name);
}

}  // namespace latte
