// The smallest program that uses an installed latte: write a GGUF file and read it back.
#include <latte/latte.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>

int main() {
  namespace fs = std::filesystem;
  const auto path = (fs::temp_directory_path() / "latte_consumer_check.gguf").string();
  latte::gguf::Writer writer;
  writer.set("general.architecture", std::string("deepseek2"));
  writer.add_tensor("probe", latte::GgmlType::f32, {4});
  writer.write(path, [](size_t, std::span<std::byte> dst) {
    const float values[4] = {1.f, 2.f, 3.f, 4.f};
    std::memcpy(dst.data(), values, sizeof values);
  });
  try {
    auto file = latte::gguf::File::open(path);
    const auto* t = file.find_tensor("probe");
    const bool ok = t && t->n_elements() == 4 && file.get<std::string>("general.architecture") == "deepseek2";
    fs::remove(path);
    std::printf("latte consumer: %s\n", ok ? "ok" : "mismatch");
    return ok ? 0 : 1;
  } catch (const latte::Error& e) {
    std::fprintf(stderr, "latte consumer: %s\n", e.what());
    return 1;
  }
}
