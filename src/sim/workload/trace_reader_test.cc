#include "sim/workload/trace_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace gandiva::sim {
namespace {

using core::Duration;
using core::Time;

const std::string kData = GANDIVA_TEST_DATA_DIR;

const Catalog& V100() {
  static const Catalog* c = [] {
    auto r = Catalog::Load(kData, GpuType::kV100);
    if (!r.ok()) {
      ADD_FAILURE() << r.status().ToString();
      std::abort();
    }
    return new Catalog(std::move(r).value());
  }();
  return *c;
}

class TraceReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gandiva_trace_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

// Expects an error whose message contains each of `parts`.
template <typename T>
void ExpectError(const core::StatusOr<T>& r,
                 std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument);
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << r.status().message();
  }
}

const char kPhillyHeader[] = "timestamp,duration,num_gpus,gpu_time,cluster\n";

TEST_F(TraceReaderTest, PhillySmallFile) {
  const std::string path =
      Write("philly.csv", std::string(kPhillyHeader) +
                              "2017-10-09 07:01:55,66.0,1,66.0,vcA\n"
                              "2017-10-09 06:13:03,2951.0,12,35412.0,vcB\n"
                              "2017-10-09 06:13:03,30.0,1,30.0,vcA\n"
                              "2017-10-10 06:13:03,100.5,4,402.0,vcA\r\n"
                              "\n");
  auto w = ReadPhillyTrace(path, V100());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 4u);
  // Sorted by time, ties in file order, re-based to the first job.
  EXPECT_EQ(w->jobs[0].name, "philly-L3");
  EXPECT_EQ(w->jobs[0].gpus, 16);  // 12 rounded up
  EXPECT_EQ(w->jobs[0].vc, "vcB");
  EXPECT_EQ(w->jobs[0].submit, Time::Zero());
  EXPECT_EQ(w->jobs[1].name, "philly-L4");
  EXPECT_EQ(w->jobs[1].submit, Time::Zero());
  EXPECT_EQ(w->jobs[2].submit, Time::Zero() + Duration::Seconds(48 * 60 + 52));
  EXPECT_EQ(w->jobs[3].submit, Time::Zero() + Duration::Seconds(86400));
  EXPECT_EQ(w->jobs[3].duration, Duration::Millis(100500));
  EXPECT_NE(w->description.find("1 non-power-of-two"), std::string::npos)
      << w->description;
  for (const TraceJob& j : w->jobs) {
    EXPECT_GE(j.model, 0);
    if (j.gpus > 1) {
      EXPECT_TRUE(V100().model(j.model).multi_gpu);
    }
  }

  PhillyOptions o;
  o.vc = "vcA";
  o.min_duration = Duration::Seconds(60);
  auto f = ReadPhillyTrace(path, V100(), o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->jobs.size(), 2u);
  EXPECT_EQ(f->jobs[0].name, "philly-L2");
  EXPECT_EQ(f->jobs[0].submit, Time::Zero());
  o.max_jobs = 1;
  EXPECT_EQ(ReadPhillyTrace(path, V100(), o)->jobs.size(), 1u);
}

TEST_F(TraceReaderTest, PhillyMalformedRows) {
  const std::string h = kPhillyHeader;
  const std::string good = "2017-10-09 07:01:55,66.0,1,66.0,vcA\n";
  struct Case {
    std::string row;
    std::string field;
    std::string problem;
  };
  const Case cases[] = {
      {"2017-10-09 07:01:55,66.0,x,66.0,vcA", "field 'num_gpus'",
       "expected a positive integer, got 'x'"},
      {"2017-10-09 07:01:55,66.0,0,66.0,vcA", "field 'num_gpus'", "got '0'"},
      {"2017-10-09 07:01:55,-5,1,66.0,vcA", "field 'duration'",
       "expected a positive number, got '-5'"},
      {"2017-10-09 07:01:55,abc,1,66.0,vcA", "field 'duration'", "'abc'"},
      {"2017-10-09 07:01:55,66.0,1,66.0", "expected 5 comma-separated", ""},
      {"2017-13-09 07:01:55,66.0,1,66.0,vcA", "field 'timestamp'", ""},
      {"2017-10-09 07:01:55,66.0,1,,vcA", "field 'gpu_time'", ""},
      {"2017-10-09 07:01:55,66.0,1,66.0,", "field 'cluster'", "empty"},
      // Past the simulator's clock: refused, never overflowed.
      {"2017-10-09 07:01:55,1e30,1,66.0,vcA", "field 'duration'",
       "'1e30' s is past what the simulator's clock takes (at most "
       "1000000000 s"},
      {"2117-10-09 07:01:55,66.0,1,66.0,vcA", "field 'timestamp'",
       "s after the first job kept, past what the simulator's clock takes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.row);
    const std::string path = Write("philly.csv", h + good + c.row + "\n");
    ExpectError(ReadPhillyTrace(path, V100()),
                {"philly.csv:3: " + c.field, c.problem});
  }
  ExpectError(ReadPhillyTrace(Write("philly.csv", "a,b\n" + good), V100()),
              {"philly.csv:1:", "header"});
  EXPECT_EQ(
      ReadPhillyTrace((dir_ / "none.csv").string(), V100()).status().code(),
      core::StatusCode::kIo);
}

TEST(ShippedTraceTest, Philly) {
  const std::string path = kData + "/philly/philly_jobs_excl_6c71a0.csv";
  auto w = ReadPhillyTrace(path, V100());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->jobs.size(), 72294u);
  size_t one = 0;
  size_t above8 = 0;
  std::set<ModelId> models;
  for (size_t i = 0; i < w->jobs.size(); ++i) {
    const TraceJob& j = w->jobs[i];
    one += j.gpus == 1;
    above8 += j.gpus > 8;
    EXPECT_EQ(j.gpus & (j.gpus - 1), 0);
    if (i > 0) {
      ASSERT_LE(w->jobs[i - 1].submit, j.submit);
    }
    models.insert(j.model);
  }
  EXPECT_EQ(one, 67573u);
  EXPECT_EQ(above8, 278u);
  EXPECT_EQ(models.size(), 10u);  // all ten family defaults appear
  EXPECT_EQ(w->jobs.front().submit, Time::Zero());

  PhillyOptions o;
  o.vc = "6214e9";
  auto vc = ReadPhillyTrace(path, V100(), o);
  ASSERT_TRUE(vc.ok());
  EXPECT_EQ(vc->jobs.size(), 41226u);
  o = PhillyOptions();
  o.min_duration = Duration::Seconds(60);
  EXPECT_EQ(ReadPhillyTrace(path, V100(), o)->jobs.size(), 72294u - 7305u);

  // Model assignment is a function of the seed (and filters) only.
  auto again = ReadPhillyTrace(path, V100());
  o = PhillyOptions();
  o.seed = 2;
  auto other = ReadPhillyTrace(path, V100(), o);
  size_t same = 0;
  size_t differ = 0;
  for (size_t i = 0; i < w->jobs.size(); ++i) {
    same += w->jobs[i].model == again->jobs[i].model;
    differ += w->jobs[i].model != other->jobs[i].model;
  }
  EXPECT_EQ(same, w->jobs.size());
  EXPECT_GT(differ, w->jobs.size() / 2);
}

std::string GavelRow(const std::string& type, const std::string& steps,
                     const std::string& arrival, const std::string& scale,
                     const std::string& data_dir = "1") {
  return type + "\tcd %s/x && python3 train.py\t-step\t" + data_dir + "\t" +
         steps + "\t" + arrival + "\t" + scale + "\n";
}

TEST_F(TraceReaderTest, GavelSmallFile) {
  const Catalog& c = V100();
  const std::string path =
      Write("vcX.trace",
            GavelRow("ResNet-50 (batch size 64)", "43948", "100.5", "1") +
                GavelRow("LM (batch size 20)", "1000", "10.000000", "8") +
                GavelRow("CycleGAN", "500", "200", "4"));
  ExpectError(ReadGavelTrace(path, c), {"vcX.trace:3: field 'scale_factor'",
                                        "('CycleGAN', 4)", "skip_unknown"});
  GavelOptions o;
  o.skip_unknown = true;
  auto w = ReadGavelTrace(path, c, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 2u);
  EXPECT_NE(w->description.find("skipped 1"), std::string::npos);
  const TraceJob& lm = w->jobs[0];
  EXPECT_EQ(lm.name, "vcX-L2");
  EXPECT_EQ(lm.vc, "vcX");
  EXPECT_EQ(lm.gpus, 8);
  EXPECT_EQ(lm.submit, Time::Zero());
  EXPECT_EQ(lm.duration,
            Duration::FromSeconds(1000 / c.IsolatedRate(lm.model, 8)));
  const TraceJob& r50 = w->jobs[1];
  EXPECT_EQ(r50.submit, Time::Zero() + Duration::Millis(90500));
  EXPECT_NEAR(r50.duration.seconds(), 43948 / 4.394774823323071, 1e-5);
  EXPECT_NEAR(TotalMiniBatches(c, r50), 43948, 1e-3);
}

TEST_F(TraceReaderTest, GavelMalformedRows) {
  const std::string good = GavelRow("A3C", "10", "0", "1");
  struct Case {
    std::string row;
    std::string field;
  };
  const Case cases[] = {
      {GavelRow("A3C", "x", "0", "1"), "field 'total_steps'"},
      {GavelRow("A3C", "-10", "0", "1"), "field 'total_steps'"},
      {GavelRow("A3C", "10", "-1", "1"), "field 'arrival_time'"},
      {GavelRow("A3C", "10", "1e12", "1"), "field 'arrival_time'"},
      {GavelRow("A3C", "1125899906842624", "0", "1"), "field 'total_steps'"},
      {GavelRow("A3C", "10", "0", "0"), "field 'scale_factor'"},
      {GavelRow("A3C", "10", "0", "1", "2"), "field 'needs_data_dir'"},
      {GavelRow("NoSuchNet", "10", "0", "1"), "field 'job_type'"},
      {"A3C\tcmd\t-n\t1\t10\t0\n", "expected 7 tab-separated fields, got 6"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.row);
    GavelOptions o;
    o.skip_unknown = c.field != "field 'job_type'";
    ExpectError(ReadGavelTrace(Write("g.trace", good + c.row), V100(), o),
                {"g.trace:2: " + c.field});
  }
}

TEST(ShippedTraceTest, GavelAllVcs) {
  auto strict = ReadGavelTrace(kData + "/gavel/seed0/6214e9.trace", V100());
  ExpectError(strict, {"6214e9.trace:", "skip_unknown"});
  GavelOptions o;
  o.skip_unknown = true;
  auto w = ReadGavelTrace(kData + "/gavel/seed0/6214e9.trace", V100(), o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->jobs.size(), 2000u - 15u);
  EXPECT_NE(w->description.find("2000 rows"), std::string::npos);
  EXPECT_NE(w->description.find("skipped 15 "), std::string::npos)
      << w->description;

  size_t rows = 0;
  size_t kept = 0;
  size_t files = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(kData + "/gavel/seed0")) {
    auto r = ReadGavelTrace(e.path().string(), V100(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ++files;
    kept += r->jobs.size();
    for (const TraceJob& j : r->jobs) EXPECT_GT(j.duration, Duration());
    rows += std::stoul(
        r->description.substr(r->description.find(": ", 7) + 2));  // "<n> rows"
  }
  EXPECT_EQ(files, 14u);
  EXPECT_EQ(rows, 13264u);
  EXPECT_EQ(rows - kept, 1485u);
}

TEST(ShippedTraceTest, Tiresias) {
  const Catalog& c = V100();
  auto w = ReadTiresiasTrace(kData + "/tiresias/60_job.csv", c);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 60u);
  size_t vgg = 0;
  size_t r50 = 0;
  size_t inc = 0;
  for (const TraceJob& j : w->jobs) {
    vgg += j.model == *c.FindFamily("VGG16");
    r50 += j.model == *c.FindFamily("ResNet-50");
    inc += j.model == *c.FindFamily("InceptionV3");
  }
  EXPECT_EQ(vgg, 24u);  // vgg11/16/19, alexnet
  EXPECT_EQ(r50, 18u);  // resnet50/101/152
  EXPECT_EQ(inc, 18u);  // inception3/4, googlenet
  EXPECT_EQ(w->jobs[0].name, "tiresias-0");
  EXPECT_EQ(w->jobs[0].duration, Duration::Seconds(164));
  EXPECT_EQ(w->jobs[1].submit, Time::Zero() + Duration::Seconds(30));
  EXPECT_EQ(w->jobs[1].gpus, 8);
}

TEST_F(TraceReaderTest, TiresiasMalformedRows) {
  const std::string h =
      "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
      "0,1,0,606,vgg19,164,30\n";
  ExpectError(
      ReadTiresiasTrace(Write("t.csv", h + "1,2,5,10,lenet,100,3\n"), V100()),
      {"t.csv:3: field 'model_name'", "'lenet'"});
  ExpectError(
      ReadTiresiasTrace(Write("t.csv", h + "1,0,5,10,vgg16,100,3\n"), V100()),
      {"t.csv:3: field 'num_gpu'"});
  ExpectError(
      ReadTiresiasTrace(Write("t.csv", h + "1,2,5,10,vgg16,-1,3\n"), V100()),
      {"t.csv:3: field 'duration'"});
  ExpectError(ReadTiresiasTrace(
                  Write("t.csv", h + "1,2,1e300,10,vgg16,100,3\n"), V100()),
              {"t.csv:3: field 'submit_time'", "past what the simulator"});
  ExpectError(
      ReadTiresiasTrace(Write("t.csv", h + "1,2,5,10,vgg16,2e9,3\n"), V100()),
      {"t.csv:3: field 'duration'", "past what the simulator"});
  ExpectError(ReadTiresiasTrace(Write("t.csv", h + "1,2,5,10,vgg16\n"), V100()),
              {"t.csv:3: expected 7 comma-separated fields"});
}

}  // namespace
}  // namespace gandiva::sim
