// `mantissa generate`: text from the newest checkpoint of a GPT run, in its tokenizer's text.
#include <cmath>
#include <iostream>

#include "cli/cli.h"
#include "runner/text/bpe_tokenizer.h"
#include "runner/text/generate.h"
#include "runner/training/build_from_config.h"
#include "runner/training/checkpoint.h"

namespace mantissa::cli {

int generate(const GenerateArgs& args) {
  runner::RunObjects run;
  std::string checkpoint;
  nn::GPTImpl* gpt = nullptr;
  std::shared_ptr<const runner::BpeTokenizer> tokenizer;
  return reporting_errors([&]() -> int {
    // The arguments first: a bad one is reported before anything is read.
    if (args.tokens < 0)
      throw runner::ConfigError("--tokens must be >= 0, got " + std::to_string(args.tokens));
    if (!(args.temperature > 0) || !std::isfinite(args.temperature)) {
      throw runner::ConfigError("--temperature must be a positive number, got " +
                                std::to_string(args.temperature));
    }
    if (args.top_k && *args.top_k < 1) {
      throw runner::ConfigError("--top-k must be >= 1, got " + std::to_string(*args.top_k));
    }
    try {
      checkpoint = resolve_checkpoint(args.run_dir);
    } catch (const Error& e) {  // no run there: a bad argument
      throw runner::ConfigError(e.what());
    }
    const runner::Config config = checkpoint_config(checkpoint, {}, args.device);
    tokenizer = run_tokenizer(config, "generate");
    run = runner::build_eval(config);
    gpt = dynamic_cast<nn::GPTImpl*>(run.model.get());
    if (gpt == nullptr) {
      throw runner::ConfigError(
          "generate needs a GPT (model.preset: gpt), but the run's model is " +
          (config.model.layers.empty() ? "model.preset " + config.model.preset
                                       : std::string("a layer list")));
    }
    load_checkpoint_model(checkpoint, *run.model);
    std::cout << runner::generate_text(*gpt, {.prompt = args.prompt,
                                              .tokens = args.tokens,
                                              .temperature = args.temperature,
                                              .top_k = args.top_k,
                                              .seed = args.seed,
                                              .tokenizer = tokenizer})
              << "\n";
    return kExitOk;
  });
}

}  // namespace mantissa::cli
