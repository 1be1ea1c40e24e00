// latte — MLA inference for DeepSeek-V2/V3/R1, GLM-4.7-Flash and GLM-5 from GGUF files.
// The umbrella header: include this one and use latte::Model, latte::Session and latte::Sampler.
//
//   auto model = latte::Model::load("model.gguf");
//   latte::Session session(model, {.n_ctx = 4096});
#pragma once

#include <latte/attention.hpp>
#include <latte/batch.hpp>
#include <latte/chat.hpp>
#include <latte/device.hpp>
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/quant.hpp>
#include <latte/quant_blocks.hpp>
#include <latte/sampler.hpp>
#include <latte/session.hpp>
#include <latte/stop_condition.hpp>
#include <latte/token.hpp>
#include <latte/tokenizer.hpp>
#include <latte/version.hpp>
