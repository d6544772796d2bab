#include "sim/workload/catalog.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace gandiva::sim {
namespace {

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

ModelId Id(const Catalog& c, const std::string& name) {
  auto id = c.Find(name);
  EXPECT_TRUE(id.has_value()) << name;
  return id.value_or(0);
}

TEST(CatalogTest, LoadsAllVariantsAndFamilies) {
  const Catalog& c = V100();
  EXPECT_EQ(c.size(), 29);
  EXPECT_EQ(c.gpu_type(), GpuType::kV100);
  EXPECT_DOUBLE_EQ(c.gpu_memory_gb(), 16.0);
  ASSERT_EQ(c.family_defaults().size(), 10u);
  for (const char* f :
       {"ResNet-50", "ResNet-18", "VGG16", "InceptionV3", "Transformer", "LM",
        "DeepSpeech", "Recommendation", "A3C", "CycleGAN"}) {
    auto id = c.FindFamily(f);
    ASSERT_TRUE(id.has_value()) << f;
    EXPECT_TRUE(c.model(*id).family_default);
    EXPECT_EQ(c.model(*id).family, f);
  }
  EXPECT_EQ(c.model(*c.FindFamily("ResNet-50")).name,
            "ResNet-50 (batch size 64)");
  EXPECT_FALSE(c.Find("ResNet-50").has_value());  // families are not entries
  for (const ModelInfo& m : c.models()) {
    EXPECT_FALSE(m.source.empty()) << m.name;
    EXPECT_GT(m.memory_gb, 0) << m.name;
    EXPECT_GT(m.utilization, 0) << m.name;
    EXPECT_LE(m.utilization, 1) << m.name;
  }
  EXPECT_NE(c.Describe().find("ResNet-50 (batch size 64)"), std::string::npos);
}

TEST(CatalogTest, RatesMatchGavelJson) {
  const Catalog& c = V100();
  const ModelId r50 = Id(c, "ResNet-50 (batch size 64)");
  EXPECT_DOUBLE_EQ(c.IsolatedRate(r50, 1), 4.394774823323071);
  EXPECT_DOUBLE_EQ(c.IsolatedRate(r50, 2), 7.922054367597505);
  EXPECT_DOUBLE_EQ(c.IsolatedRate(r50, 8), 17.303172756892167);
  EXPECT_TRUE(c.IsMeasured(r50, 8));
  const ModelId lm = Id(c, "LM (batch size 20)");
  EXPECT_DOUBLE_EQ(c.IsolatedRate(lm, 1), 64.74245099960703);
  EXPECT_DOUBLE_EQ(c.IsolatedRate(Id(c, "Transformer (batch size 128)"), 4),
                   14.17451716526748);
  EXPECT_DOUBLE_EQ(c.IsolatedRate(Id(c, "CycleGAN"), 1), 4.426088263367452);

  auto k80 = Catalog::Load(kData, GpuType::kK80);
  ASSERT_TRUE(k80.ok()) << k80.status().ToString();
  EXPECT_DOUBLE_EQ(k80->IsolatedRate(r50, 1), 0.6190282202246573);
  EXPECT_DOUBLE_EQ(k80->gpu_memory_gb(), 12.0);
  auto p100 = Catalog::Load(kData, GpuType::kP100);
  ASSERT_TRUE(p100.ok()) << p100.status().ToString();
  EXPECT_DOUBLE_EQ(p100->IsolatedRate(Id(*p100, "A3C"), 1), 5.681346110543853);
}

TEST(CatalogTest, ExtrapolatesMissingAndLargeGpuCounts) {
  const Catalog& c = V100();
  const ModelId gan = Id(c, "CycleGAN");
  EXPECT_TRUE(c.IsMeasured(gan, 1));
  EXPECT_FALSE(c.IsMeasured(gan, 2));
  EXPECT_DOUBLE_EQ(c.IsolatedRate(gan, 2), 4.426088263367452 * 2 * 0.85);
  EXPECT_DOUBLE_EQ(c.IsolatedRate(gan, 4), 4.426088263367452 * 4 * 0.85 * 0.85);
  // Above 8 GPUs each doubling keeps (1 + cross_server) / 2.
  const ModelId r50 = Id(c, "ResNet-50 (batch size 64)");
  EXPECT_FALSE(c.IsMeasured(r50, 16));
  EXPECT_DOUBLE_EQ(c.IsolatedRate(r50, 16), 17.303172756892167 * 1.53);
  EXPECT_DOUBLE_EQ(c.IsolatedRate(r50, 128),
                   17.303172756892167 * 1.53 * 1.53 * 1.53 * 1.53);
  // Sublinear but growing for every model beyond 8 GPUs.
  for (ModelId m = 0; m < c.size(); ++m) {
    for (int g = 8; g < 1024; g *= 2) {
      EXPECT_GT(c.IsolatedRate(m, 2 * g), c.IsolatedRate(m, g));
      EXPECT_LT(c.IsolatedRate(m, 2 * g), 2 * c.IsolatedRate(m, g));
    }
  }
  // Non-powers of two interpolate.
  const double r3 = c.IsolatedRate(r50, 3);
  EXPECT_DOUBLE_EQ(r3, (c.IsolatedRate(r50, 2) + c.IsolatedRate(r50, 4)) / 2);
  // The paper's estimated models scale with their family efficiency.
  const ModelId vgg = *c.FindFamily("VGG16");
  EXPECT_FALSE(c.IsMeasured(vgg, 1));
  EXPECT_NEAR(c.IsolatedRate(vgg, 2), 2 * 0.85 * c.IsolatedRate(vgg, 1), 1e-12);
}

TEST(CatalogTest, SpreadFactorsFromThePaper) {
  const Catalog& c = V100();
  const ModelId vgg = *c.FindFamily("VGG16");
  const ModelId r50 = *c.FindFamily("ResNet-50");
  EXPECT_DOUBLE_EQ(c.SpreadFactor(vgg, Spread::kCrossSocket), 0.60);
  EXPECT_DOUBLE_EQ(c.SpreadFactor(r50, Spread::kCrossSocket), 1.0);
  EXPECT_DOUBLE_EQ(c.SpreadFactor(r50, Spread::kCrossServer), 0.53);
  EXPECT_DOUBLE_EQ(
      c.SpreadFactor(*c.FindFamily("InceptionV3"), Spread::kCrossServer), 0.70);
  EXPECT_DOUBLE_EQ(
      c.SpreadFactor(*c.FindFamily("DeepSpeech"), Spread::kCrossServer), 0.95);
  // Every variant of a family shares its factors; ordered best to worst.
  EXPECT_DOUBLE_EQ(
      c.SpreadFactor(Id(c, "ResNet-50 (batch size 16)"), Spread::kCrossServer),
      0.53);
  for (ModelId m = 0; m < c.size(); ++m) {
    EXPECT_DOUBLE_EQ(c.SpreadFactor(m, Spread::kSameSwitch), 1.0);
    for (int s = 1; s < kNumSpreads; ++s) {
      EXPECT_LE(c.SpreadFactor(m, static_cast<Spread>(s)),
                c.SpreadFactor(m, static_cast<Spread>(s - 1)));
      EXPECT_GT(c.SpreadFactor(m, static_cast<Spread>(s)), 0.0);
    }
  }
}

TEST(CatalogTest, PackedRatesMeasured) {
  const Catalog& c = V100();
  const ModelId lm = Id(c, "LM (batch size 20)");
  const ModelId r50 = Id(c, "ResNet-50 (batch size 16)");
  // Gavel: v100 ('LM (batch size 20)', 1) -> ('ResNet-50 (batch size 16)', 1)
  // = [27.256929620769746, 3.966157257389484].
  const PackOutcome p = c.PackedRates(lm, r50);
  EXPECT_EQ(p.source, PackSource::kMeasured);
  EXPECT_DOUBLE_EQ(p.factor_a, 27.256929620769746 / 64.74245099960703);
  EXPECT_DOUBLE_EQ(p.factor_b, 3.966157257389484 / 11.396129065315943);
  const PackOutcome q = c.PackedRates(r50, lm);
  EXPECT_EQ(q.source, PackSource::kMeasured);
  EXPECT_NEAR(q.factor_a, p.factor_b, 1e-12);
  EXPECT_NEAR(q.factor_b, p.factor_a, 1e-12);
  // Gavel records [0, 0]: the pair could not be co-located.
  const PackOutcome z = c.PackedRates(Id(c, "ResNet-50 (batch size 128)"), lm);
  EXPECT_EQ(z.source, PackSource::kInfeasible);
  EXPECT_EQ(z.factor_a, 0.0);
  // Measured factors never exceed 1.
  for (ModelId a = 0; a < c.size(); ++a) {
    for (ModelId b = 0; b < c.size(); ++b) {
      const PackOutcome o = c.PackedRates(a, b);
      EXPECT_LE(o.factor_a, 1.0 + 1e-9);
      EXPECT_LE(o.factor_b, 1.0 + 1e-9);
    }
  }
}

TEST(CatalogTest, PackedRatesModelledAndInfeasible) {
  const Catalog& c = V100();
  const ModelId vgg = *c.FindFamily("VGG16");  // 11 GB, util 0.95
  const ModelId lm = Id(c, "LM (batch size 20)");
  const PackOutcome m = c.PackedRates(vgg, lm);
  EXPECT_EQ(m.source, PackSource::kModelled);
  const double u = c.model(vgg).utilization + c.model(lm).utilization;
  EXPECT_DOUBLE_EQ(m.factor_a, std::min(1.0, 1.0 / u) * 0.95);
  EXPECT_DOUBLE_EQ(m.factor_b, m.factor_a);
  // 11 + 11 GB > 16 GB.
  EXPECT_EQ(c.PackedRates(vgg, vgg).source, PackSource::kInfeasible);
  const ModelId ds = *c.FindFamily("DeepSpeech");  // 8 GB
  EXPECT_EQ(c.PackedRates(ds, ds).source, PackSource::kModelled);
  EXPECT_EQ(c.PackedRates(vgg, ds).source, PackSource::kInfeasible);
}

TEST(CatalogTest, GpuTypeNames) {
  EXPECT_EQ(*ParseGpuType("p100"), GpuType::kP100);
  EXPECT_FALSE(ParseGpuType("a100").ok());
  EXPECT_STREQ(GpuTypeName(GpuType::kK80), "k80");
  EXPECT_STREQ(SpreadName(Spread::kCrossSocket), "cross_socket");
  EXPECT_STREQ(PackSourceName(PackSource::kModelled), "modelled");
}

TEST(CatalogTest, DefaultDataDir) {
  const char* old = std::getenv("GANDIVA_DATA_DIR");
  const std::string saved = old ? old : "";
  setenv("GANDIVA_DATA_DIR", "/some/where", 1);
  EXPECT_EQ(DefaultDataDir(), "/some/where");
  unsetenv("GANDIVA_DATA_DIR");
  const std::string compiled = DefaultDataDir();
  EXPECT_TRUE(compiled.ends_with("/data")) << compiled;
  EXPECT_TRUE(std::filesystem::exists(compiled + "/catalog/models.json"));
  if (old) setenv("GANDIVA_DATA_DIR", saved.c_str(), 1);
}

// A minimal data dir with one family, to corrupt field by field.
class BadCatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gandiva_catalog_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_ / "catalog");
    std::filesystem::create_directories(dir_ / "gavel");
    std::ofstream(dir_ / "gavel" / "t.json")
        << R"J({"v100": {"('A', 1)": {"null": 2.0, "('A', 1)": [1.5, 1.5]}}})J";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string CatalogText(const std::string& memory,
                                 const std::string& spread_socket = "0.8",
                                 const std::string& def = "A") {
    return R"({"format": "gandiva-catalog-1",
      "gavel_throughputs": "gavel/t.json",
      "gpu_memory_gb": {"k80": 12, "p100": 16, "v100": 16},
      "beyond_server": {"gpus_per_server": 8, "source": "s"},
      "packing_model": {"interference_penalty": 0.05, "source": "s"},
      "families": [{"family": "A", "default_variant": ")" +
           def + R"(", "multi_gpu": true,
        "scaling_efficiency": 0.9, "scaling_source": "s",
        "spread": {"same_switch": 1.0, "cross_switch": 0.9,
                   "cross_socket": )" +
           spread_socket + R"(, "cross_server": 0.5},
        "spread_source": "s",
        "variants": [{"name": "A", "rates": "gavel", "memory_gb": )" +
           memory + R"(, "utilization": 0.5, "source": "s"}]}]})";
  }
  void Write(const std::string& text) {
    std::ofstream(dir_ / "catalog" / "models.json") << text;
  }
  std::string LoadError() {
    auto r = Catalog::Load(dir_.string(), GpuType::kV100);
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : r.status().message();
  }

  std::filesystem::path dir_;
};

TEST_F(BadCatalogTest, GoodMinimalCatalogLoads) {
  Write(CatalogText("2.0"));
  auto r = Catalog::Load(dir_.string(), GpuType::kV100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->PackedRates(0, 0).source, PackSource::kMeasured);
  EXPECT_DOUBLE_EQ(r->PackedRates(0, 0).factor_a, 0.75);
  EXPECT_DOUBLE_EQ(r->IsolatedRate(0, 2), 3.6);
}

TEST_F(BadCatalogTest, ErrorsNameFileAndField) {
  Write(CatalogText("\"x\""));
  std::string e = LoadError();
  EXPECT_NE(e.find("models.json"), std::string::npos) << e;
  EXPECT_NE(e.find("families[0].variants[0].memory_gb"), std::string::npos)
      << e;
  Write(CatalogText("-1"));
  EXPECT_NE(LoadError().find("memory_gb"), std::string::npos);
  Write(CatalogText("2.0", "0.95"));  // cross_socket above cross_switch
  e = LoadError();
  EXPECT_NE(e.find("families[0].spread.cross_socket"), std::string::npos) << e;
  Write(CatalogText("2.0", "0.8", "B"));
  EXPECT_NE(LoadError().find("default_variant"), std::string::npos);
  Write("{ not json");
  e = LoadError();
  EXPECT_NE(e.find("models.json: not valid JSON"), std::string::npos) << e;
  Write(R"({"format": "gandiva-catalog-1"})");
  EXPECT_NE(LoadError().find("'gavel_throughputs': missing"),
            std::string::npos);
  EXPECT_EQ(Catalog::Load("/nonexistent", GpuType::kV100).status().code(),
            core::StatusCode::kIo);
}

}  // namespace
}  // namespace gandiva::sim
