// `mantissa plot`: a hand-written SVG of a run's metrics.jsonl — three panels sharing the step
// axis: loss (training, and evaluation as points), learning rate, and loss scale. A panel switches
// to a log axis when its values are positive and span more than two decades. Lines are decimated
// to the pixel width, so a run of a million steps plots into a file of the same size.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include "cli/cli.h"
#include "runner/files/atomic_file.h"
#include "runner/files/json.h"
#include "runner/files/output_target.h"

namespace mantissa::cli {
namespace {

namespace fs = std::filesystem;

struct Series {
  std::vector<double> x, y;
};

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double map(double v) const {  // -> [0, 1]
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

Axis make_axis(const std::vector<const Series*>& series, bool allow_log) {
  double lo = INFINITY, hi = -INFINITY;
  for (const Series* s : series) {
    for (double v : s->y) {
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  Axis a;
  if (!std::isfinite(lo)) return a;
  if (allow_log && lo > 0 && hi / lo > 100) {
    a.log = true;
    a.lo = std::pow(10.0, std::floor(std::log10(lo)));
    a.hi = std::pow(10.0, std::ceil(std::log10(hi)));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
    return a;
  }
  if (hi == lo) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  a.lo = lo, a.hi = hi;
  return a;
}

std::vector<double> ticks(const Axis& a) {
  std::vector<double> out;
  if (a.log) {
    for (double v = a.lo; v <= a.hi * 1.0001; v *= 10) out.push_back(v);
    return out;
  }
  const double raw = (a.hi - a.lo) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5   ? mag
                      : raw / mag < 3.5 ? 2 * mag
                      : raw / mag < 7.5 ? 5 * mag
                                        : 10 * mag;
  for (double v = std::ceil(a.lo / step) * step; v <= a.hi + step * 1e-9; v += step) {
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return out;
}

// The points of a line as drawn, at most four per pixel column (the first, lowest, highest and
// last there, in step order): the same picture as every point, spikes included, in a file whose
// size does not grow with the run's length.
std::vector<std::pair<double, double>> decimate(const std::vector<std::pair<double, double>>& pts) {
  std::vector<std::pair<double, double>> out;
  size_t i = 0;
  while (i < pts.size()) {
    const double column = std::floor(pts[i].first);
    size_t end = i, lo = i, hi = i;
    for (; end < pts.size() && std::floor(pts[end].first) == column; ++end) {
      if (pts[end].second > pts[lo].second) lo = end;  // SVG y grows downwards: lowest value
      if (pts[end].second < pts[hi].second) hi = end;
    }
    size_t keep[] = {i, std::min(lo, hi), std::max(lo, hi), end - 1};
    for (size_t k = 0; k < 4; ++k)
      if (k == 0 || keep[k] != keep[k - 1]) out.push_back(pts[keep[k]]);
    i = end;
  }
  return out;
}

class Svg {
 public:
  static constexpr double kWidth = 820, kPanel = 210, kLeft = 80, kRight = 20, kTop = 40, kGap = 50;

  Svg(double x_lo, double x_hi, int panels) : x_{x_lo, x_hi, false} {
    height_ = kTop + panels * (kPanel + kGap);
    os_ << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\""
        << height_ << "\" viewBox=\"0 0 " << kWidth << " " << height_
        << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
        << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  }

  void title(const std::string& text) {
    os_ << "<text x=\"" << kWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">"
        << escape(text) << "</text>\n";
  }

  // One panel: axes, ticks, labels and each series as a polyline (or as points).
  void panel(int index, const std::string& label, const std::vector<const Series*>& lines,
             const std::vector<std::string>& colors, const Series* points = nullptr,
             bool allow_log = true) {
    std::vector<const Series*> all = lines;
    if (points) all.push_back(points);
    const Axis y = make_axis(all, allow_log);
    const double top = kTop + index * (kPanel + kGap), w = kWidth - kLeft - kRight;
    auto px = [&](double v) { return kLeft + x_.map(v) * w; };
    auto py = [&](double v) { return top + (1 - y.map(v)) * kPanel; };
    os_ << "<g>\n<rect x=\"" << kLeft << "\" y=\"" << top << "\" width=\"" << w << "\" height=\""
        << kPanel << "\" fill=\"none\" stroke=\"#444\"/>\n";
    for (double t : ticks(y)) {
      os_ << "<line x1=\"" << kLeft - 4 << "\" x2=\"" << kLeft + w << "\" y1=\"" << py(t)
          << "\" y2=\"" << py(t) << "\" stroke=\"#ddd\"/>\n<text x=\"" << kLeft - 6 << "\" y=\""
          << py(t) + 4 << "\" text-anchor=\"end\">" << fmt(t) << "</text>\n";
    }
    for (double t : ticks(x_)) {
      os_ << "<line x1=\"" << px(t) << "\" x2=\"" << px(t) << "\" y1=\"" << top + kPanel
          << "\" y2=\"" << top + kPanel + 4 << "\" stroke=\"#444\"/>\n<text x=\"" << px(t)
          << "\" y=\"" << top + kPanel + 16 << "\" text-anchor=\"middle\">" << fmt(t)
          << "</text>\n";
    }
    os_ << "<text x=\"" << kLeft + w / 2 << "\" y=\"" << top + kPanel + 32
        << "\" text-anchor=\"middle\">step</text>\n";
    os_ << "<text transform=\"translate(18," << top + kPanel / 2
        << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" << escape(label)
        << (y.log ? " (log)" : "") << "</text>\n";
    for (size_t i = 0; i < lines.size(); ++i) {
      os_ << "<polyline fill=\"none\" stroke=\"" << colors[i]
          << "\" stroke-width=\"1.5\" points=\"";
      const Series& s = *lines[i];
      std::vector<std::pair<double, double>> pts;
      for (size_t k = 0; k < s.x.size(); ++k) {
        if (!std::isfinite(s.y[k]) || (y.log && s.y[k] <= 0)) continue;
        pts.emplace_back(px(s.x[k]), py(s.y[k]));
      }
      for (const auto& [sx, sy] : decimate(pts)) os_ << fmt(sx) << "," << fmt(sy) << " ";
      os_ << "\"/>\n";
    }
    if (points) {
      std::vector<std::pair<double, double>> pts;
      for (size_t k = 0; k < points->x.size(); ++k) {
        if (!std::isfinite(points->y[k]) || (y.log && points->y[k] <= 0)) continue;
        pts.emplace_back(px(points->x[k]), py(points->y[k]));
      }
      for (const auto& [cx, cy] : decimate(pts)) {
        os_ << "<circle cx=\"" << fmt(cx) << "\" cy=\"" << fmt(cy)
            << "\" r=\"3\" fill=\"#d62728\"/>\n";
      }
      os_ << "<text x=\"" << kLeft + w - 4 << "\" y=\"" << top + 14
          << "\" text-anchor=\"end\"><tspan fill=\"" << colors[0]
          << "\">train</tspan> <tspan fill=\"#d62728\">eval</tspan></text>\n";
    }
    os_ << "</g>\n";
  }

  std::string finish() { return os_.str() + "</svg>\n"; }

 private:
  static std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '<')
        out += "&lt;";
      else if (c == '>')
        out += "&gt;";
      else if (c == '&')
        out += "&amp;";
      else
        out += c;
    }
    return out;
  }
  Axis x_;
  double height_ = 0;
  std::ostringstream os_;
};

double number(runner::JsonView j, const char* key) {
  const std::optional<runner::JsonView> v = j.find(key);
  return v && v->is_number() ? v->as_double() : NAN;
}

}  // namespace

int plot(const std::string& run_dir, const std::string& out_arg, bool force) {
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  const std::string out = out_arg.empty() ? (fs::path(run_dir) / "plot.svg").string() : out_arg;
  std::istringstream in;
  try {
    runner::check_output_target(out, {path, run_dir}, force);
    in.str(runner::read_file_bytes(path));
  } catch (const runner::OutputRefused& e) {
    print_error(e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    print_error(std::string(e.what()) + " (is " + run_dir + " a run directory?)");
    return kExitUsage;
  }
  Series loss, lr, scale, eval;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    runner::Json parsed;
    try {
      parsed = runner::json::parse(line, path + " line " + std::to_string(n));
    } catch (const std::exception&) {
      continue;  // a line cut short by a killed run
    }
    const runner::JsonView j(parsed);
    if (!j.is_object()) continue;
    if (const std::optional<runner::JsonView> e = j.find("eval")) {
      if (e->is_object())
        eval.x.push_back(number(*e, "step")), eval.y.push_back(number(*e, "loss"));
      continue;
    }
    const double step = number(j, "step");
    if (!std::isfinite(step)) continue;
    loss.x.push_back(step), loss.y.push_back(number(j, "loss"));
    lr.x.push_back(step), lr.y.push_back(number(j, "lr"));
    scale.x.push_back(step), scale.y.push_back(number(j, "loss_scale"));
  }
  if (loss.x.empty()) {
    print_error(path + " has no step records to plot");
    return kExitFailed;
  }
  double x_lo = loss.x.front(), x_hi = loss.x.back();
  for (double v : loss.x) x_lo = std::min(x_lo, v), x_hi = std::max(x_hi, v);
  for (double v : eval.x) {
    if (std::isfinite(v)) x_lo = std::min(x_lo, v), x_hi = std::max(x_hi, v);
  }
  if (x_hi <= x_lo) x_hi = x_lo + 1;
  Svg svg(x_lo, x_hi, 3);
  svg.title(fs::path(run_dir).filename().string().empty() ? run_dir
                                                          : fs::path(run_dir).filename().string());
  svg.panel(0, "loss", {&loss}, {"#1f77b4"}, eval.x.empty() ? nullptr : &eval);
  svg.panel(1, "learning rate", {&lr}, {"#2ca02c"});
  svg.panel(2, "loss scale", {&scale}, {"#9467bd"});
  try {
    runner::write_file_atomically(out, svg.finish());
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitFailed;
  }
  std::cout << "wrote " << out << " (" << loss.x.size() << " steps, " << eval.x.size()
            << " evaluations)\n";
  return kExitOk;
}

}  // namespace mantissa::cli
