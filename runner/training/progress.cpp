// The progress bar / periodic progress lines.
#include "runner/training/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace mantissa::runner {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  char buf[32];
  const auto s = static_cast<int64_t>(seconds);
  if (seconds < 60)
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", long(s / 60), long(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", long(s / 3600), long(s / 60 % 60));
  return buf;
}

ProgressBar::ProgressBar(std::optional<bool> tty, double plain_every_s, std::FILE* out)
    : tty_(tty.value_or(isatty(fileno(out)) != 0)), plain_every_s_(plain_every_s), out_(out) {}

void ProgressBar::on_train_begin(Trainer& trainer) {
  start_ = last_draw_ = Clock::now();
  start_step_ = trainer.step();
  drawn_ = false;
}

void ProgressBar::on_batch_end(Trainer& trainer) {
  const auto now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since >= (tty_ ? 0.1 : plain_every_s_)) draw(trainer, false);
}

void ProgressBar::on_eval(Trainer&, const EvalMetrics&) {
  if (tty_ && drawn_) std::fputc('\n', out_);  // keep the bar line above the eval line
  drawn_ = false;
}

void ProgressBar::on_train_end(Trainer& trainer, const TrainSummary&) {
  draw(trainer, true);
  if (tty_) std::fputc('\n', out_);
  std::fflush(out_);
}

void ProgressBar::draw(Trainer& trainer, bool final) {
  const auto now = Clock::now();
  last_draw_ = now;
  const int64_t step = trainer.step(), total = std::max<int64_t>(trainer.total_steps(), 1);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(step - start_step_) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total - step) / rate : NAN;
  const double frac = std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0);
  char loss[32] = "-";
  if (!std::isnan(trainer.last_loss()))
    std::snprintf(loss, sizeof loss, "%.5g", trainer.last_loss());
  char tail[160];
  std::snprintf(tail, sizeof tail, "%ld/%ld  loss %s  %.1f it/s  %s %s", long(step), long(total),
                loss, rate, final ? "elapsed" : "ETA",
                format_duration(final ? elapsed : eta).c_str());
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r[%s] %3d%%  %s\033[K", bar.c_str(), static_cast<int>(frac * 100), tail);
  } else {
    std::fprintf(out_, "progress: %3d%%  step %s\n", static_cast<int>(frac * 100), tail);
  }
  std::fflush(out_);
  drawn_ = true;
}

}  // namespace mantissa::runner
