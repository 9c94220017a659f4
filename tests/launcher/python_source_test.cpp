// torch.distributed.launch's --local_rank: found in a script's text, and what ddprun then passes the workers.
#include <doctest/doctest.h>

#include <algorithm>

#include "common/error.hpp"
#include "launcher/cli.hpp"
#include "launcher/python_source.hpp"
#include "temp_dir.hpp"

using namespace ddprun::launcher;
using ddprun::UsageError;

namespace {
const std::vector<std::string> kEnv = {"PATH=/usr/bin:/bin"};

bool has_note(const CommandLine& c, const std::string& start, const std::string& part = "") {
  return std::any_of(c.notes.begin(), c.notes.end(), [&](const std::string& n) {
    return n.rfind(start, 0) == 0 && n.find(part) != std::string::npos;
  });
}

// pytorch/examples' distributed/ddp/example.py parses its local rank so (a default, not required).
const char* kLaunchExample = R"(import argparse
if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    # This is passed in via launch.py
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--local_world_size", type=int, default=1)
    args = parser.parse_args()
)";
}  // namespace

TEST_CASE("the local rank option is found in an add_argument call's option strings") {
  CHECK(declared_local_rank_option(kLaunchExample) == "--local_rank");
  CHECK(declared_local_rank_option("p.add_argument('--local-rank', type=int)") == "--local-rank");
  // torch 2.x's advice: both spellings in one call; the first is the one passed.
  CHECK(declared_local_rank_option("p.add_argument(\"--local-rank\", \"--local_rank\", type=int)") == "--local-rank");
  CHECK(declared_local_rank_option("p.add_argument(\n    '-l',\n    # the launcher's\n    '--local_rank',\n)") ==
        "--local_rank");
  CHECK(declared_local_rank_option("add_argument  ( r'--local_rank' , required=True)") == "--local_rank");
  // Not a declaration: commented out, another call, a keyword's value, a longer name, only a mention.
  CHECK(declared_local_rank_option("# parser.add_argument('--local_rank')\n").empty());
  CHECK(declared_local_rank_option("x = 1  # p.add_argument('--local_rank')\n").empty());
  CHECK(declared_local_rank_option("p.my_add_argument('--local_rank')").empty());
  CHECK(declared_local_rank_option("p.add_argument('--rank', help='--local_rank')").empty());
  CHECK(declared_local_rank_option("p.add_argument('--local_rank_offset', type=int)").empty());
  CHECK(declared_local_rank_option("print('pass --local_rank')\nlocal_rank = int(os.environ['LOCAL_RANK'])").empty());
  CHECK(declared_local_rank_option("p.add_argument(").empty());
  CHECK(declared_local_rank_option("p.add_argument('--local_rank").empty());  // the literal never ends
  CHECK(declared_local_rank_option("").empty());
}

// Issue 34: what argparse would not see made ddprun pass --local_rank=N, and the script's main parser exit 2.
TEST_CASE("a local rank option argparse would not see is not found: sub-command, uncalled function, docstring") {
  CHECK(declared_local_rank_option("import argparse\np = argparse.ArgumentParser()\nsub = p.add_subparsers()\n"
                                   "train = sub.add_parser('train')\ntrain.add_argument('--local_rank', type=int)\n"
                                   "p.parse_args()\n")
            .empty());
  CHECK(declared_local_rank_option("def legacy_parser():\n    p = argparse.ArgumentParser()\n"
                                   "    p.add_argument('--local_rank', type=int)\n    return p\n\n"
                                   "def main():\n    p = argparse.ArgumentParser()\n    p.parse_args()\n\nmain()\n")
            .empty());
  CHECK(declared_local_rank_option("\"\"\"Usage: launch with p.add_argument('--local_rank') in your script.\"\"\"\n"
                                   "import os\nprint(os.environ['LOCAL_RANK'])\n")
            .empty());
  // Called functions and methods still count, as does the main parser beside a sub-command.
  CHECK(declared_local_rank_option("def get_args():\n    p = argparse.ArgumentParser()\n"
                                   "    p.add_argument('--local_rank', type=int)\n    return p.parse_args()\n\n"
                                   "args = get_args()\n") == "--local_rank");
  CHECK(declared_local_rank_option("class T:\n    def parser(self):\n        p = argparse.ArgumentParser()\n"
                                   "        p.add_argument('--local-rank', type=int)\n        return p\n"
                                   "T().parser().parse_args()\n") == "--local-rank");
  CHECK(declared_local_rank_option("p = argparse.ArgumentParser()\np.add_argument('--local_rank', type=int)\n"
                                   "sub = p.add_subparsers()\ntrain = sub.add_parser('train')\n") == "--local_rank");
}

TEST_CASE("a module's file is looked up in the working directory, then PYTHONPATH") {
  const TempDir d;
  d.file("lib/pkg/train.py", "x");
  d.file("lib/tool/__main__.py", "x");
  const std::vector<std::string> env = {"PYTHONPATH=/nonexistent::" + d.path + "/lib"};
  CHECK(module_source_file("pkg.train", env) == d.path + "/lib/pkg/train.py");
  CHECK(module_source_file("tool", env) == d.path + "/lib/tool/__main__.py");
  CHECK(module_source_file("pkg.missing", env).empty());
  CHECK(module_source_file("pkg.train", kEnv).empty());  // not in the working directory
  CHECK(module_source_file("", env).empty());
}

TEST_CASE("a launch-style script gets --local_rank=N as under launch; --use-env and none pass nothing") {
  const TempDir d;
  const std::string example = d.file("example.py", kLaunchExample);
  const std::string dash = d.file("dash.py", "parser.add_argument('--local-rank', type=int, required=True)\n");
  const std::string plain = d.file("plain.py", "import os\nprint(os.environ['LOCAL_RANK'])\n");

  // pytorch/examples' README line with ddprun as its first word: launch's --local_rank, and a line saying so.
  CommandLine c = parse_command_line({"--nnodes=1", "--nproc_per_node=2", example}, kEnv);
  CHECK(c.agent.local_rank_arg == "--local_rank");
  CHECK(c.agent.argv == std::vector<std::string>{"python3", "-u", example});
  CHECK(c.agent.local_rank_arg_at == 3);
  CHECK(has_note(c, example + " declares --local_rank: each worker gets --local_rank=<its local rank>",
                 "--local-rank-arg none"));
  // The spelling the script declares, so that argparse knows it.
  CHECK(parse_command_line({dash, "--lr", "1"}, kEnv).agent.local_rank_arg == "--local-rank");
  // A module's file is read too.
  const std::string pythonpath = "PYTHONPATH=" + d.path;
  c = parse_command_line({"-m", "example"}, {"PATH=/usr/bin:/bin", pythonpath});
  CHECK(c.agent.local_rank_arg == "--local_rank");
  CHECK(c.agent.local_rank_arg_at == 4);  // python3 -u -m example: after the module's name

  // A script that declares nothing: nothing passed, nothing said (as torchrun).
  c = parse_command_line({"--nproc_per_node=2", plain}, kEnv);
  CHECK(c.agent.local_rank_arg.empty());
  CHECK_FALSE(has_note(c, "", "declares"));
  // --use-env: launch passed nothing, nor does ddprun; a warning says what the script will see.
  c = parse_command_line({"--use_env", "--nproc_per_node=2", example}, kEnv);
  CHECK(c.agent.local_rank_arg.empty());
  CHECK(has_note(c, "warning: " + example + " declares --local_rank, which ddprun does not pass under --use-env"));
  // Said explicitly, the option wins over the script's text, and none turns the pass off without a word.
  c = parse_command_line({"--local-rank-arg", "dash", example}, kEnv);
  CHECK(c.agent.local_rank_arg == "--local-rank");
  CHECK_FALSE(has_note(c, "", "declares"));
  c = parse_command_line({"--local-rank-arg", "none", example}, kEnv);
  CHECK(c.agent.local_rank_arg.empty());
  CHECK_FALSE(has_note(c, "", "declares"));
  CHECK(parse_command_line({"--use-env", "--local-rank-arg", "none", example}, kEnv).agent.local_rank_arg.empty());
  CHECK_THROWS_AS(parse_command_line({"--use-env", "--local-rank-arg", "underscore", example}, kEnv), UsageError);
  CHECK_THROWS_AS(parse_command_line({"--local-rank-arg", "camel", example}, kEnv), UsageError);
  // A program that is not Python is not read: --no-python runs it as it is.
  CHECK(parse_command_line({"--no-python", "true", example}, kEnv).agent.local_rank_arg.empty());
}
