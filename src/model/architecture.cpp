#include "model/architecture.hpp"

#include <latte/error.hpp>

namespace latte::detail {

const ArchitectureOps& architecture_ops(Architecture arch) {
  switch (arch) {
    case Architecture::deepseek2:
      return deepseek2_ops();
    case Architecture::glm_dsa:
      return glm_dsa_ops();
  }
  throw Error(ErrorCode::internal, "no ops for architecture " + std::to_string(static_cast<int>(arch)));
}

}  // namespace latte::detail
