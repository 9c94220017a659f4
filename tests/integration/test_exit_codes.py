"""tests/support/exit_codes.py against common/exit_codes.hpp, where ddprun's exit codes are defined, and the
README's "Exit codes" table: the same names (kExitRdzvLost is RDZV_LOST) with the same values, and a row for
each, so that a test's HUNG can never drift from the program's 78."""
import os
import re
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
import exit_codes

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def python_name(cpp_name):
    """kExitRdzvLost -> RDZV_LOST, kExitOsError -> OS_ERROR."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cpp_name[len("kExit"):]).upper()


def header_codes():
    """{C++ name: value} from common/exit_codes.hpp, a name given as another name resolved."""
    codes = {}
    for name, value in re.findall(r"inline constexpr int (kExit\w+) = (\w+);", read("common/exit_codes.hpp")):
        codes[name] = int(value) if value.isdigit() else codes[value]
    return codes


def python_codes():
    return {name: value for name, value in vars(exit_codes).items() if name.isupper()}


class ExitCodes(unittest.TestCase):
    def test_the_python_names_are_the_headers_with_the_same_values(self):
        header = header_codes()
        self.assertGreaterEqual(len(header), 15, header)
        self.assertEqual({python_name(n): v for n, v in header.items()}, python_codes())

    def test_the_launchers_names_are_all_defined_in_common(self):
        used = re.findall(r"using ddprun::(kExit\w+);", read("launcher/exit_codes.hpp"))
        self.assertTrue(used)
        self.assertEqual(set(used) - set(header_codes()), set())

    def test_the_readme_has_a_row_for_every_code(self):
        section = read("README.md").split("## Exit codes", 1)[1].split("\n## ", 1)[0]
        rows = {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.M)}
        self.assertEqual(set(python_codes().values()) - rows, set(), section)


if __name__ == "__main__":
    unittest.main()
