#include "gguf/file_mapping.hpp"

#include <latte/error.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace latte::gguf {
namespace {

[[noreturn]] void throw_io(const std::string& path, const char* what, int err) {
  throw Error(ErrorCode::io, path + ": cannot " + what + ": " + std::strerror(err));
}

// Closes a descriptor on every path out of the constructor.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

FileMapping::FileMapping(const std::string& path) {
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT) throw Error(ErrorCode::not_found, path + ": no such file");
    throw_io(path, "open", errno);
  }
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw_io(path, "stat", errno);
  if (!S_ISREG(info.st_mode)) throw Error(ErrorCode::io, path + ": not a regular file");
  size_ = static_cast<size_t>(info.st_size);
  if (size_ == 0) return;
  void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (address == MAP_FAILED) {
    size_ = 0;
    throw_io(path, "map", errno);
  }
  data_ = static_cast<const std::byte*>(address);
}

FileMapping::FileMapping(FileMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

FileMapping& FileMapping::operator=(FileMapping&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

FileMapping::~FileMapping() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace latte::gguf
