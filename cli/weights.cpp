// `mantissa eval`, `mantissa export` and `mantissa import`: checkpoints and weights files.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "cli/cli.h"
#include "runner/files/atomic_file.h"
#include "runner/files/gpt_weights.h"
#include "runner/files/hf_gpt2_config.h"
#include "runner/files/json.h"
#include "runner/files/output_target.h"
#include "runner/files/safetensors.h"
#include "runner/files/text.h"
#include "runner/training/build_from_config.h"
#include "runner/training/checkpoint.h"
#include "runner/training/model_builder.h"

namespace mantissa::cli {
namespace {

namespace fs = std::filesystem;
using runner::shape_str;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Points the config's data at `data` (train / val / a file).
void select_data(runner::Config& c, const std::string& data, bool* use_val) {
  const bool has_val = c.data.val_split > 0 || !c.data.val_path().empty();
  *use_val = has_val;
  if (data.empty()) return;
  if (data == "train" || data == "val") {
    if (data == "val" && !has_val) {
      throw runner::ConfigError(
          "--data val: the run has no validation split (data.val_split is 0)");
    }
    *use_val = data == "val";
    return;
  }
  runner::DataConfig d;
  d.batch_size = c.data.batch_size;
  d.shuffle = false;
  if (ends_with(data, ".csv")) {
    runner::CsvOptions csv;
    if (const auto* given = std::get_if<runner::CsvOptions>(&c.data.options)) {
      csv.target_columns = given->target_columns;
      csv.input_columns = given->input_columns;
    }
    csv.path = data;
    csv.target_dtype = c.loss.type == "cross_entropy" ? DType::Int64 : DType::Float32;
    d.type = "csv";
    d.options = csv;
  } else if (ends_with(data, ".safetensors")) {
    runner::SafetensorsDataOptions st;
    if (const auto* given = std::get_if<runner::SafetensorsDataOptions>(&c.data.options)) {
      st = *given;
    }
    st.path = data;
    d.type = "safetensors";
    d.options = st;
  } else {
    throw runner::ConfigError("--data " + data +
                              ": expected train, val, or a .csv or .safetensors file");
  }
  c.value_text["data.path"] = data;
  c.origin["data.path"] = "--data";
  c.data = d;
  *use_val = false;
}

}  // namespace

int eval(const EvalArgs& args) {
  runner::RunObjects run;
  std::string checkpoint;
  bool use_val = false;
  return reporting_errors([&]() -> int {
    checkpoint = resolve_checkpoint(args.source);
    runner::Config config = checkpoint_config(checkpoint, args.sets, args.device);
    select_data(config, args.data, &use_val);
    run = runner::build_eval(config);
    load_checkpoint_model(checkpoint, *run.model);
    runner::DataLoader& loader = use_val ? *run.val_loader : *run.train_loader;
    loader.set_epoch(0);
    // The evaluation the trainer runs, so that both report the same numbers.
    const runner::EvalMetrics m =
        runner::evaluate_model(*run.model, run.forward, run.loss, loader,
                               {run.device, amp::Precision::parse(run.config.precision),
                                run.config.loss.reduction == "sum"});
    const std::string what = args.data.empty() ? (use_val ? "val" : "train") : args.data;
    if (args.json) {
      runner::Json j = runner::Json::object();
      j["checkpoint"] = checkpoint;
      j["data"] = what;
      j["samples"] = m.samples;
      j["loss"] = m.loss;
      if (m.accuracy) j["accuracy"] = *m.accuracy;
      std::cout << runner::json::dump(j) << "\n";
    } else {
      std::cout << "checkpoint " << checkpoint << "\ndata " << what << " ("
                << loader.dataset().describe() << ")\nloss " << m.loss;
      if (m.accuracy) std::cout << "  accuracy " << *m.accuracy;
      std::cout << "  (" << m.samples << " samples, " << run.config.loss.type << ")\n";
    }
    return kExitOk;
  });
}

namespace {

// `export --layout hf`: OUT/model.safetensors in GPT2LMHeadModel's names and layout and
// OUT/config.json from the run's model.
int export_hf(const std::string& checkpoint, const std::string& source, const std::string& out,
              bool force) {
  const fs::path dir(out);
  const std::string weights = (dir / "model.safetensors").string();
  const std::string config = (dir / "config.json").string();
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw runner::OutputRefused("--layout hf writes a directory, but " + out +
                                " is something else");
  runner::check_output_target(weights, {checkpoint, source}, force);
  runner::check_output_target(config, {checkpoint, source}, force);
  const runner::CheckpointInfo info = runner::read_checkpoint(checkpoint);
  const runner::Config run = runner::parse_config(info.config_text, checkpoint + " (its config)");
  MT_CHECK(runner::is_gpt(run.model), "--layout hf: ", checkpoint,
           " is not a GPT run (model.preset gpt); only a GPT has Hugging Face's GPT-2 layout");
  const std::string config_text = runner::hf_gpt2_config_json(runner::gpt_config(run.model));
  fs::create_directories(dir);
  runner::save_safetensors(weights, runner::to_hf_layout(info.weights), {{"format", "pt"}});
  runner::write_file_atomically(config, config_text);
  std::cout << "wrote " << weights << " and " << config << " from " << checkpoint
            << " (GPT2LMHeadModel.from_pretrained(\"" << out << "\") reads them)\n";
  return kExitOk;
}

}  // namespace

int export_weights(const std::string& source, const std::string& out, bool force,
                   const std::string& layout) {
  return reporting_errors([&]() -> int {
    const std::string checkpoint = resolve_checkpoint(source);
    if (layout == "hf") return export_hf(checkpoint, source, out, force);
    // Before the checkpoint is read: a refused target is reported at once.
    runner::check_output_target(out, {checkpoint, source}, force);
    const runner::CheckpointInfo info = runner::read_checkpoint(checkpoint);
    std::map<std::string, std::string> meta{{"format", "pt"},
                                            {"mantissa.config_hash", info.config_hash}};
    if (info.trainer_state) meta["mantissa.step"] = std::to_string(info.trainer_state->step);
    runner::save_safetensors(out, info.weights, meta);
    std::cout << "wrote " << info.weights.size() << " tensors from " << checkpoint << " to " << out
              << "\n";
    return kExitOk;
  });
}

namespace {

// `import --layout`: a GPT state dict converted to nn::GPT's names, optionally written to --out.
int import_gpt(const ImportArgs& args, const runner::SafetensorsFile& file) {
  return reporting_errors([&]() -> int {
    const runner::GptLayout asked = runner::parse_gpt_layout(args.layout);
    const runner::GptLayout layout = asked == runner::GptLayout::Auto
                                         ? runner::detect_gpt_layout(file.tensors, args.path)
                                         : asked;
    runner::NamedTensors converted = runner::to_gpt_layout(file.tensors, layout, args.path);
    // nanoGPT's state dict has the tied output layer under both names; so does the file written.
    runner::add_tied_lm_head(converted);
    nn::GPTConfig base;
    const nn::GPTConfig c = runner::infer_gpt_config(converted, base);
    if (const int64_t prefixed = runner::compile_prefixed_names(file.tensors); prefixed > 0) {
      std::cout << prefixed << " names start with torch.compile's \"_orig_mod.\" (a compiled "
                << "model's state dict): read without it\n";
    }
    std::cout << "a GPT in the " << runner::gpt_layout_name(layout)
              << " layout: n_layer=" << c.n_layer << " n_embd=" << c.n_embd
              << " vocab_size=" << c.vocab_size << " block_size=" << c.block_size
              << " bias=" << (c.bias ? "true" : "false");
    // Hugging Face's config.json beside the weights gives what they do not: n_head, the
    // activation and LayerNorm's epsilon.
    if (const auto hf = runner::read_hf_gpt2_config_beside(args.path)) {
      runner::check_hf_gpt2_config_matches(*hf, c);
      std::cout << "\n"
                << hf->path << ": n_head=" << hf->gpt.n_head
                << " activation_function=" << hf->activation_function
                << " layer_norm_epsilon=" << hf->gpt.layer_norm_eps
                << "\nin a config: model: {preset: gpt, n_layer: " << c.n_layer
                << ", n_head: " << hf->gpt.n_head << ", n_embd: " << c.n_embd
                << ", block_size: " << c.block_size << ", vocab_size: " << c.vocab_size
                << ", activation: " << hf->gpt.activation
                << ", layer_norm_eps: " << hf->gpt.layer_norm_eps << "}\n";
    } else {
      std::cout << " (n_head is not stored in weights, and no config.json is beside them)\n";
    }
    if (args.out.empty()) return kExitOk;
    runner::check_output_target(args.out, {args.path}, args.force);
    runner::save_safetensors(args.out, converted, {{"format", "pt"}});
    std::cout << "wrote " << converted.size() << " tensors in nanoGPT's names and layout to "
              << args.out << "\n";
    return kExitOk;
  });
}

}  // namespace

int import_weights(const ImportArgs& args) {
  if (!args.out.empty() && args.layout.empty()) {
    print_error(
        "import: --out writes converted GPT weights and needs --layout (nanogpt, hf or auto)");
    return kExitUsage;
  }
  runner::SafetensorsFile file;
  return reporting_errors([&]() -> int {
    file = runner::load_safetensors(args.path);
    int64_t total = 0;
    std::cout << args.path << ": " << file.tensors.size() << " tensors\n";
    for (const auto& [name, t] : file.tensors) {
      std::printf("  %-32s %-9s %s\n", name.c_str(), std::string(dtype_name(t.dtype())).c_str(),
                  shape_str(t.shape()).c_str());
      total += t.numel();
    }
    std::cout << "  " << total << " values\n";
    for (const auto& [k, v] : file.metadata) std::cout << "  metadata " << k << " = " << v << "\n";
    if (!args.layout.empty()) return import_gpt(args, file);
    if (args.config.empty()) return kExitOk;
    runner::Config config = runner::parse_config_file(args.config, args.sets);
    auto model = runner::build_run_model(config.model);
    auto* gpt = dynamic_cast<nn::GPTImpl*>(model.get());
    const runner::LoadWeightsReport report =
        gpt ? runner::load_gpt_weights(*gpt, file) : runner::load_weights(*model, file, true);
    std::cout << "loads into the model of " << args.config << " ("
              << model->named_parameters().size() << " parameters"
              << (report.converted_keys.empty() ? "" : ", some converted") << ")\n"
              << "use it with: model.init_from: " << args.path << "\n";
    return kExitOk;
  });
}

}  // namespace mantissa::cli
