// Tests of hostnccl/settings.h, the one table of HOSTNCCL_* variables: each row is read with its kind (accepting and
// refusing what the kind says, with the row's message), docs/hostnccl.md holds the rows, and no other code of
// hostnccl or its launcher reads a HOSTNCCL_* variable itself.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "hostnccl/settings.h"

namespace {

using hostnccl::Setting;
using hostnccl::SettingInfo;

// What a test asks of one row: a valid value and what it reads as, and a value its kind refuses.
struct Sample {
  const char* valid;
  std::string read_as;
  const char* invalid;
};

std::string text_of(double value) { return std::to_string(value); }
std::string text_of(hostnccl::ReduceOrder order) { return order == hostnccl::ReduceOrder::kRank ? "rank" : "arrival"; }
std::string text_of(std::size_t value) { return std::to_string(value); }
std::string text_of(std::string_view value) { return std::string(value); }
std::string text_of(const hostnccl::Corruption& value) {
  return std::string(value.enabled ? "on" : "off") + " rank " + std::to_string(value.rank) + " call " +
         std::to_string(value.call) + " element " + std::to_string(value.element) + " factor " +
         std::to_string(value.factor);
}

template <Setting id>
void check_row(const Sample& sample) {
  const SettingInfo& info = hostnccl::setting_info(id);
  using Value = typename hostnccl::SettingKind<id>::type::Value;
  const Value initial{};
  std::string error;

  unsetenv(info.name);
  Value value = initial;
  EXPECT_TRUE(hostnccl::read_setting<id>(&value, &error)) << info.name << " unset: " << error;
  EXPECT_EQ(value, initial) << info.name << " unset leaves the caller's default";
  setenv(info.name, "", 1);
  EXPECT_TRUE(hostnccl::read_setting<id>(&value, &error)) << info.name << " empty: " << error;
  EXPECT_EQ(value, initial) << info.name << " empty means unset";

  setenv(info.name, sample.valid, 1);
  EXPECT_TRUE(hostnccl::read_setting<id>(&value, &error)) << info.name << "=" << sample.valid << ": " << error;
  EXPECT_EQ(text_of(value), sample.read_as) << info.name << "=" << sample.valid;

  setenv(info.name, sample.invalid, 1);
  Value untouched = initial;
  error.clear();
  EXPECT_FALSE(hostnccl::read_setting<id>(&untouched, &error)) << info.name << "=" << sample.invalid;
  EXPECT_EQ(untouched, initial) << info.name << ": a malformed value leaves the caller's default";
  EXPECT_EQ(error, std::string(info.name) + "='" + sample.invalid + "' is not valid: use " + info.accepted_text);
  unsetenv(info.name);
}

TEST(HostncclSettings, EveryRowIsReadWithItsKind) {
  const std::map<Setting, Sample> samples = {
      {Setting::kTimeoutS, {"2.5", text_of(2.5), "soon"}},
      {Setting::kReduceOrder, {"rank", "rank", "Rank"}},
      {Setting::kSlotBytes, {"5000", "4992", "12"}},
      {Setting::kRingBytes, {"4096", "4096", "-4096"}},
      {Setting::kJobTag, {"4711x9f86", "4711x9f86", "Tag-1"}},
      {Setting::kCorrupt,
       {"element:3,factor:1001,rank:1,call:7", "on rank 1 call 7 element 3 factor " + std::to_string(1001.0),
        "rank:1,call:7,element:3"}},
  };
  std::size_t checked = 0;
#define HOSTNCCL_CHECK_ROW(id, name, kind, default_text, accepted_text, description) \
  if (Setting::id != Setting::kIdFile) {                                             \
    ASSERT_TRUE(samples.contains(Setting::id)) << "add sample values of " << name;   \
    check_row<Setting::id>(samples.at(Setting::id));                                 \
    ++checked;                                                                       \
  }
  HOSTNCCL_SETTINGS(HOSTNCCL_CHECK_ROW)
#undef HOSTNCCL_CHECK_ROW
  EXPECT_EQ(checked, samples.size());

  // A path takes any non-empty text; unset leaves the caller's empty string, which bootstrap.cc refuses itself.
  std::string path;
  std::string error;
  setenv("HOSTNCCL_ID_FILE", "/tmp/a b/unique-id", 1);
  EXPECT_TRUE(hostnccl::read_setting<Setting::kIdFile>(&path, &error)) << error;
  EXPECT_EQ(path, "/tmp/a b/unique-id");
  unsetenv("HOSTNCCL_ID_FILE");
}

TEST(HostncclSettings, TheNamesAreTheTablesInTableOrder) {
  std::size_t index = 0;
  for (const SettingInfo& info : hostnccl::kSettings) {
    EXPECT_EQ(static_cast<std::size_t>(info.id), index++) << info.name;
    EXPECT_EQ(std::string_view(info.name).rfind("HOSTNCCL_", 0), 0u) << info.name;
  }
  EXPECT_STREQ(hostnccl::kTimeoutVariable, "HOSTNCCL_TIMEOUT_S");
  EXPECT_STREQ(hostnccl::kJobTagVariable, "HOSTNCCL_JOB_TAG");
}

// docs/hostnccl.md's environment table holds one line per row, in table order, exactly as generated here.
TEST(HostncclSettings, HostncclMdHoldsTheTable) {
  std::ifstream file(DETNCCL_SOURCE_DIR "/docs/hostnccl.md");
  ASSERT_TRUE(file) << "docs/hostnccl.md is missing";
  const std::string docs((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::string rows;
  for (const SettingInfo& info : hostnccl::kSettings) {
    rows += std::string("| `") + info.name + "` | " + info.default_text + " | " + info.description + " |\n";
  }
  EXPECT_NE(docs.find("| variable | default | meaning |\n| --- | --- | --- |\n" + rows), std::string::npos)
      << "docs/hostnccl.md's environment table must start with these rows (from hostnccl/settings.h):\n"
      << rows;
}

// Only settings.h reads HOSTNCCL_* variables (one parser per variable): no other source of hostnccl or of its
// launcher calls getenv with a HOSTNCCL_ name or a k...Variable constant.
TEST(HostncclSettings, NothingElseReadsAHostncclVariable) {
  namespace fs = std::filesystem;
  std::size_t sources = 0;
  for (const char* folder : {"hostnccl", "launcher"}) {
    const fs::path root = fs::path(DETNCCL_SOURCE_DIR) / folder;
    if (!fs::exists(root)) continue;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(root)) {
      const std::string extension = entry.path().extension().string();
      if (!entry.is_regular_file() || (extension != ".cc" && extension != ".h")) continue;
      if (entry.path().filename() == "settings.h") continue;
      ++sources;
      std::ifstream in(entry.path());
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (std::size_t at = text.find("getenv("); at != std::string::npos; at = text.find("getenv(", at + 1)) {
        const std::string argument = text.substr(at + 7, 12);
        EXPECT_FALSE(argument.rfind("\"HOSTNCCL_", 0) == 0 || argument.rfind("k", 0) == 0)
            << entry.path() << " reads " << argument << "...: use read_setting (hostnccl/settings.h)";
      }
    }
  }
  EXPECT_GT(sources, 10u);
}

}  // namespace
