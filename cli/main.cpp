// `mantissa`: config-driven training runs from the command line (docs/cli.md). A thin shell over
// the runner library: CLI11 parses the command line, runner/ does the work.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/cli.h"

namespace cli = mantissa::cli;

int main(int argc, char** argv) {
  CLI::App app{"mantissa: mixed-precision training runs from YAML configs", "mantissa"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every command");

  cli::TrainArgs train;
  auto* t = app.add_subcommand("train", "Train a model from a YAML config (default: the ToyModel)");
  t->add_option("config", train.config, "Config file (default: the built-in configs/toy.yaml)");
  t->add_option("--set", train.sets, "Override a config key: --set optimizer.lr=0.1 (repeatable)")
      ->allow_extra_args(false);
  t->add_option("--device", train.device, "cpu, cuda, cuda:N or auto (overrides the config)");
  t->add_option("--run-dir", train.run_dir,
                "Run directory (default: runs/<name>-<YYYYmmdd-HHMMSS>)");
  t->add_option("--nproc", train.nproc,
                "Train data-parallel on N local ranks (processes), as distributed.nproc; not "
                "needed under torchrun, mpirun or srun")
      ->check(CLI::Range(1, 1024));
  t->add_flag("--dry-run", train.dry_run, "Validate and print the resolved config; write nothing");
  t->add_flag("-q,--quiet", train.quiet, "No progress output");

  cli::ResumeArgs resume;
  auto* r = app.add_subcommand(
      "resume",
      "Continue a run from its newest valid checkpoint (on as many ranks as it had, or --nproc)");
  r->add_option("run_dir", resume.run_dir, "The run directory")->required();
  r->add_option("--device", resume.device, "Resume on another device (cpu, cuda, cuda:N)");
  r->add_option("--nproc", resume.nproc,
                "Resume on N local ranks instead of the run's distributed.nproc (1: one "
                "process); the data continues from the same global position")
      ->check(CLI::Range(1, 1024));
  r->add_flag("-q,--quiet", resume.quiet, "No progress output");

  cli::EvalArgs eval;
  auto* e = app.add_subcommand("eval", "Loss and metrics of a checkpoint on a dataset");
  e->add_option("source", eval.source, "Run directory (newest valid checkpoint) or checkpoint file")
      ->required();
  e->add_option("--data", eval.data,
                "train, val (the run's split; default val when it has one) or a .csv / "
                ".safetensors file");
  e->add_option("--set", eval.sets, "Override a key of the run's config, e.g. data.batch_size=256")
      ->allow_extra_args(false);
  e->add_option("--device", eval.device, "cpu, cuda, cuda:N or auto");
  e->add_flag("--json", eval.json, "Print the result as one JSON object");

  std::string export_source, export_out, export_layout = "mantissa";
  bool export_force = false;
  auto* x = app.add_subcommand("export", "Write a checkpoint's model weights as safetensors");
  x->add_option("source", export_source, "Run directory or checkpoint file")->required();
  x->add_option("out", export_out,
                "Output .safetensors file; with --layout hf, a directory (model.safetensors and "
                "config.json)")
      ->required();
  x->add_option("--layout", export_layout,
                "mantissa: the model's state dict (for a GPT, nanoGPT's names and layout; the "
                "default); hf: a GPT as Hugging Face's GPT2LMHeadModel.from_pretrained reads it")
      ->check(CLI::IsMember({"mantissa", "hf"}));
  x->add_flag("--force", export_force,
              "Replace OUT even if it is a symbolic link (the link itself) or a file of a run "
              "(its checkpoints, resolved.yaml, metrics.jsonl, ...); never a device, FIFO or "
              "directory");

  cli::ImportArgs import;
  auto* i =
      app.add_subcommand("import", "Validate a safetensors weights file and list its tensors");
  i->add_option("weights", import.path, "The .safetensors file")->required();
  i->add_option("--config", import.config, "Also check it loads into this config's model");
  i->add_option("--set", import.sets, "Override a key of --config")->allow_extra_args(false);
  i->add_option("--layout", import.layout,
                "Read a GPT state dict in this layout (nanogpt, hf or auto) and convert it to "
                "mantissa's (nanoGPT's) names and layout")
      ->check(CLI::IsMember({"nanogpt", "hf", "auto"}));
  i->add_option("--out", import.out, "With --layout: write the converted weights here");
  i->add_flag("--force", import.force,
              "Replace --out even if it is a symbolic link (the link itself) or a file of a run");

  app.add_subcommand("devices", "List the CPU and every GPU with what they support");

  std::string plot_dir, plot_out;
  bool plot_force = false;
  auto* p = app.add_subcommand("plot", "Plot loss, learning rate and loss scale of a run (SVG)");
  p->add_option("run_dir", plot_dir, "The run directory")->required();
  p->add_option("-o,--out", plot_out, "Output file (default: RUN_DIR/plot.svg)");
  p->add_flag("--force", plot_force,
              "Replace the output even if it is a symbolic link (the link itself) or a file of a "
              "run (its checkpoints, resolved.yaml, metrics.jsonl, ...); never a device, FIFO or "
              "directory");

  cli::GenerateArgs gen;
  auto* g = app.add_subcommand("generate", "Sample text from a GPT run's newest checkpoint");
  g->add_option("run_dir", gen.run_dir,
                "Run directory (newest valid checkpoint) or checkpoint file")
      ->required();
  g->add_option("--prompt", gen.prompt, "Text to continue (default: a newline)");
  g->add_option("--tokens", gen.tokens,
                "Tokens to sample after the prompt (bytes for a data.type text run; default 256)");
  g->add_option("--temperature", gen.temperature,
                "Divide the logits by this before sampling (default 1; lower: more likely tokens)");
  g->add_option("--top-k", gen.top_k, "Sample among the K most likely tokens only (default: all)");
  g->add_option("--seed", gen.seed, "Sampling seed: the same seed gives the same text (default 0)");
  g->add_option("--device", gen.device, "cpu, cuda, cuda:N or auto (default: the run's)");

  cli::PrepareArgs prep;
  auto* pr = app.add_subcommand(
      "prepare",
      "Tokenize a text file with a GPT-2-style BPE tokenizer into nanoGPT's train.bin and val.bin");
  pr->add_option("text", prep.text, "The text file (UTF-8)")->required();
  pr->add_option("--tokenizer", prep.tokenizer,
                 "Hugging Face tokenizer.json, GPT-2's vocab.json (with merges.txt beside it), or "
                 "a folder holding either")
      ->required();
  pr->add_option("--out", prep.out_dir, "Folder for train.bin and val.bin (default: the text's)");
  pr->add_option("--val-fraction", prep.val_fraction,
                 "The last part of the text (by characters) that becomes val.bin (default 0.1, "
                 "nanoGPT's split; 0: no val.bin)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    const int code = app.exit(err);
    return code == 0 ? 0 : cli::kExitUsage;
  }

  if (t->parsed()) return cli::train(train);
  if (r->parsed()) return cli::resume(resume);
  if (e->parsed()) return cli::eval(eval);
  if (x->parsed())
    return cli::export_weights(export_source, export_out, export_force, export_layout);
  if (i->parsed()) return cli::import_weights(import);
  if (app.get_subcommand("devices")->parsed()) return cli::devices();
  if (p->parsed()) return cli::plot(plot_dir, plot_out, plot_force);
  if (g->parsed()) return cli::generate(gen);
  if (pr->parsed()) return cli::prepare(prep);
  return cli::kExitUsage;
}
