"""Package discovery: every package under gdn_equiv/, and strategies/ installed as gdn_equiv.strategies.

pyproject.toml holds the rest of the metadata; setuptools' declarative ``find`` cannot rename a folder (the
``package-dir`` entry does that), so the packages are found here, where a new subpackage cannot be forgotten
(tests/test_packaging.py builds the wheel and fails, naming it, when one is missing).
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["gdn_equiv", "gdn_equiv.*"]),
        "gdn_equiv.strategies",
        *(f"gdn_equiv.strategies.{p}" for p in find_packages("strategies")),
    ]
)
