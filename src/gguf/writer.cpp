// latte::gguf::Writer: lays out a GGUF v3 file (header, then tensors at aligned offsets fixed before any
// data is produced), then writes it with several threads, each pwrite-ing whole tensors at their
// precomputed offsets into `path.partial`, renamed to `path` once everything is on disk.
#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

namespace latte::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF files are written little-endian");

namespace {

constexpr uint32_t gguf_version = 3;
constexpr uint32_t default_alignment = 32;    // bytes
constexpr size_t max_tensor_name_bytes = 63;  // ggml's GGML_MAX_NAME (64) minus the terminator
constexpr std::string_view alignment_key = "general.alignment";

uint64_t align_up(uint64_t offset, uint64_t alignment) { return (offset + alignment - 1) / alignment * alignment; }

// Appends little-endian encodings to a byte buffer.
class HeaderBuffer {
 public:
  template <class T>
  void scalar(T value) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &value, sizeof(T));
  }
  void string(std::string_view text) {
    scalar<uint64_t>(text.size());
    const size_t at = bytes.size();
    bytes.resize(at + text.size());
    if (!text.empty()) std::memcpy(bytes.data() + at, text.data(), text.size());
  }
  void value(const Value& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            string(x);
          } else if constexpr (std::is_same_v<T, Array>) {
            array(x);
          } else if constexpr (std::is_same_v<T, bool>) {
            scalar<uint8_t>(x ? 1 : 0);
          } else {
            scalar<T>(x);
          }
        },
        v.storage());
  }
  void array(const Array& a) {
    scalar<uint32_t>(static_cast<uint32_t>(a.element_type));
    scalar<uint64_t>(a.size());
    std::visit(
        [&](const auto& elements) {
          using T = typename std::decay_t<decltype(elements)>::value_type;
          if constexpr (std::is_same_v<T, std::string>) {
            for (const auto& e : elements) string(e);
          } else if constexpr (std::is_same_v<T, bool>) {
            for (bool e : elements) scalar<uint8_t>(e ? 1 : 0);
          } else {
            const size_t at = bytes.size();
            bytes.resize(at + elements.size() * sizeof(T));
            if (!elements.empty()) std::memcpy(bytes.data() + at, elements.data(), elements.size() * sizeof(T));
          }
        },
        a.values);
  }

  std::vector<std::byte> bytes;
};

// Checks that an Array's element_type names the vector it holds (arrays of arrays cannot be held).
void check_value(const std::string& key, const Value& value) {
  const auto* array = value.get_if<Array>();
  if (!array) return;
  const ValueType held = std::visit(
      [](const auto& elements) { return value_type_of<typename std::decay_t<decltype(elements)>::value_type>(); },
      array->values);
  if (array->element_type != held) {
    throw Error(ErrorCode::invalid_argument, "metadata key '" + key + "': array element_type is " +
                                                 std::string(value_type_name(array->element_type)) +
                                                 " but the array holds " + std::string(value_type_name(held)));
  }
}

bool is_valid_alignment(uint32_t alignment) { return alignment != 0 && (alignment & (alignment - 1)) == 0; }

[[noreturn]] void throw_io(const std::string& path, const std::string& what, int err) {
  throw Error(ErrorCode::io, path + ": cannot " + what + ": " + std::strerror(err));
}

// Writes all of `bytes` at `offset`, retrying short writes and interrupted calls.
void pwrite_all(int fd, const std::string& path, std::span<const std::byte> bytes, uint64_t offset) {
  while (!bytes.empty()) {
    const size_t chunk = std::min<size_t>(bytes.size(), size_t{1} << 30);
    const ssize_t written = ::pwrite(fd, bytes.data(), chunk, static_cast<off_t>(offset));
    if (written < 0) {
      if (errno == EINTR) continue;
      throw_io(path, "write " + std::to_string(chunk) + " bytes at byte offset " + std::to_string(offset), errno);
    }
    bytes = bytes.subspan(static_cast<size_t>(written));
    offset += static_cast<uint64_t>(written);
  }
}

// Owns the descriptor of `path.partial`; removes the file unless committed.
class PartialFile {
 public:
  explicit PartialFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_io(path_, "create", errno);
  }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  ~PartialFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] const std::string& path() const { return path_; }

  // Flushes, closes and renames to `final_path`.
  void commit(const std::string& final_path) {
    if (::fsync(fd_) != 0) throw_io(path_, "sync", errno);
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw_io(path_, "close", errno);
    if (std::rename(path_.c_str(), final_path.c_str()) != 0) throw_io(final_path, "rename " + path_ + " to", errno);
    committed_ = true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

struct Writer::Impl {
  std::vector<KeyValue> metadata;  // in first-insertion order
  std::unordered_map<std::string, size_t> key_index;
  uint32_t alignment = default_alignment;  // bytes
  std::vector<TensorInfo> tensors;         // offsets relative to the data section
  std::unordered_map<std::string, size_t> tensor_index;

  // Packs tensors back to back, each starting at a multiple of the alignment.
  void place_tensors() {
    uint64_t offset = 0;
    for (auto& t : tensors) {
      t.offset = offset;
      offset = align_up(offset + t.n_bytes, alignment);
    }
  }
  // Bytes of the data section: every tensor, each padded to the alignment (as ggml pads them).
  [[nodiscard]] uint64_t data_bytes() const {
    return tensors.empty() ? 0 : align_up(tensors.back().offset + tensors.back().n_bytes, alignment);
  }
  void erase_key(std::string_view key) {
    const auto it = key_index.find(std::string(key));
    if (it == key_index.end()) return;
    metadata.erase(metadata.begin() + static_cast<std::ptrdiff_t>(it->second));
    key_index.clear();
    for (size_t i = 0; i < metadata.size(); ++i) key_index.emplace(metadata[i].key, i);
  }
  [[nodiscard]] std::vector<std::byte> header() const {
    HeaderBuffer out;
    out.bytes.reserve(4096);
    out.scalar<uint32_t>(0x46554747u);  // "GGUF"
    out.scalar<uint32_t>(gguf_version);
    out.scalar<uint64_t>(tensors.size());
    out.scalar<uint64_t>(metadata.size());
    for (const auto& kv : metadata) {
      out.string(kv.key);
      out.scalar<uint32_t>(static_cast<uint32_t>(kv.value.type()));
      out.value(kv.value);
    }
    for (const auto& t : tensors) {
      out.string(t.name);
      out.scalar<uint32_t>(t.n_dims);
      for (uint32_t d = 0; d < t.n_dims; ++d) out.scalar<uint64_t>(t.ne[d]);
      out.scalar<uint32_t>(static_cast<uint32_t>(t.type));
      out.scalar<uint64_t>(t.offset);
    }
    out.bytes.resize(align_up(out.bytes.size(), alignment), std::byte{0});
    return std::move(out.bytes);
  }
};

Writer::Writer() : impl_(std::make_unique<Impl>()) {}
Writer::~Writer() = default;
Writer::Writer(Writer&&) noexcept = default;
Writer& Writer::operator=(Writer&&) noexcept = default;

void Writer::set(std::string key, Value value) {
  if (key.empty()) throw Error(ErrorCode::invalid_argument, "metadata key is empty");
  check_value(key, value);
  if (key == alignment_key) {
    const auto* alignment = value.get_if<uint32_t>();
    if (!alignment || !is_valid_alignment(*alignment)) {
      throw Error(ErrorCode::invalid_argument, "general.alignment must be a u32 power of two");
    }
    impl_->alignment = *alignment;
    impl_->place_tensors();
  }
  if (auto it = impl_->key_index.find(key); it != impl_->key_index.end()) {
    impl_->metadata[it->second].value = std::move(value);
    return;
  }
  impl_->key_index.emplace(key, impl_->metadata.size());
  impl_->metadata.push_back({std::move(key), std::move(value)});
}

void Writer::set_alignment(uint32_t alignment) {
  if (!is_valid_alignment(alignment)) {
    throw Error(ErrorCode::invalid_argument, "alignment " + std::to_string(alignment) + " bytes is not a power of two");
  }
  if (alignment == default_alignment) {
    impl_->erase_key(alignment_key);
    impl_->alignment = alignment;
    impl_->place_tensors();
  } else {
    set(std::string(alignment_key), Value(alignment));
  }
}

void Writer::add_tensor(std::string name, GgmlType type, std::span<const uint64_t> ne) {
  const auto fail = [&](const std::string& problem) {
    throw Error(ErrorCode::invalid_argument, "tensor '" + name + "': " + problem);
  };
  if (name.empty()) fail("empty name");
  if (name.size() > max_tensor_name_bytes) {
    fail("name is " + std::to_string(name.size()) + " bytes; ggml allows at most " +
         std::to_string(max_tensor_name_bytes));
  }
  if (impl_->tensor_index.count(name)) fail("declared twice");
  if (ne.empty() || ne.size() > max_dims) fail(std::to_string(ne.size()) + " dimensions, expected 1..4");
  const auto layout = find_type_traits(static_cast<uint32_t>(type));
  if (!layout) fail("unknown ggml type id " + std::to_string(static_cast<uint32_t>(type)));

  TensorInfo t;
  t.name = name;
  t.type = type;
  t.n_dims = static_cast<uint32_t>(ne.size());
  uint64_t n_elements = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] == 0) fail("dimension ne[" + std::to_string(d) + "] is 0");
    if (__builtin_mul_overflow(n_elements, ne[d], &n_elements) ||
        n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail("element count overflows");
    }
    t.ne[d] = ne[d];
  }
  if (t.ne[0] % layout->block_values != 0) {
    fail("row of " + std::to_string(t.ne[0]) + " values is not a multiple of " + std::string(layout->name) +
         "'s block of " + std::to_string(layout->block_values));
  }
  if (__builtin_mul_overflow(t.ne[0] / layout->block_values * layout->block_bytes, t.n_rows(), &t.n_bytes)) {
    fail("size in bytes overflows");
  }
  impl_->tensor_index.emplace(name, impl_->tensors.size());
  impl_->tensors.push_back(std::move(t));
  impl_->place_tensors();
}

std::span<const TensorInfo> Writer::tensors() const noexcept { return impl_->tensors; }

namespace {
void require_fill(const Writer::Fill& fill, size_t n_tensors) {
  if (!fill && n_tensors > 0) {
    throw Error(ErrorCode::invalid_argument, "no fill function given for " + std::to_string(n_tensors) + " tensors");
  }
}
}  // namespace

void Writer::write(const std::string& path, const Fill& fill, unsigned n_threads) const {
  require_fill(fill, impl_->tensors.size());
  const std::vector<std::byte> header = impl_->header();
  const uint64_t data_offset = header.size();
  const uint64_t file_size = data_offset + impl_->data_bytes();

  PartialFile out(path + ".partial");
  // Sizing the file first makes the padding between tensors zeros without writing it.
  if (::ftruncate(out.fd(), static_cast<off_t>(file_size)) != 0) {
    throw_io(out.path(), "resize to " + std::to_string(file_size) + " bytes", errno);
  }
  pwrite_all(out.fd(), out.path(), header, 0);

  const auto& tensors = impl_->tensors;
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mutex;
  std::exception_ptr first_error;
  const auto worker = [&] {
    std::unique_ptr<std::byte[]> buffer;  // one tensor's bytes, reused
    size_t capacity = 0;                  // bytes
    try {
      for (size_t i = next++; i < tensors.size() && !stop; i = next++) {
        const TensorInfo& t = tensors[i];
        if (t.n_bytes > capacity) {
          buffer.reset();
          try {
            buffer = std::make_unique_for_overwrite<std::byte[]>(t.n_bytes);
          } catch (const std::bad_alloc&) {
            throw Error(ErrorCode::out_of_memory, path + ": cannot allocate " + std::to_string(t.n_bytes) +
                                                      " bytes to write tensor '" + t.name + "'");
          }
          capacity = t.n_bytes;
        }
        const std::span<std::byte> dst(buffer.get(), t.n_bytes);
        fill(i, dst);
        pwrite_all(out.fd(), out.path(), dst, data_offset + t.offset);
      }
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
      stop = true;
    }
  };
  const size_t n_workers = std::clamp<size_t>(n_threads, 1, std::max<size_t>(tensors.size(), 1));
  {
    std::vector<std::jthread> threads;  // joined at the end of this scope
    threads.reserve(n_workers - 1);
    for (size_t k = 1; k < n_workers; ++k) {
      try {
        threads.emplace_back(worker);
      } catch (const std::system_error&) {
        break;  // the system refused another thread: the ones running share the rest
      }
    }
    worker();  // the calling thread works too
  }
  if (first_error) std::rethrow_exception(first_error);
  out.commit(path);
}

std::vector<std::byte> Writer::write_to_memory(const Fill& fill) const {
  require_fill(fill, impl_->tensors.size());
  std::vector<std::byte> image = impl_->header();
  const uint64_t data_offset = image.size();
  image.resize(data_offset + impl_->data_bytes(), std::byte{0});
  for (size_t i = 0; i < impl_->tensors.size(); ++i) {
    const TensorInfo& t = impl_->tensors[i];
    fill(i, std::span<std::byte>(image.data() + data_offset + t.offset, t.n_bytes));
  }
  return image;
}

}  // namespace latte::gguf
