"""The one compiled part: ``strata.spark._recordwalk``, the record walk of the Spark source's decoder (see its
source for why). Optional: without a C compiler the build goes on and the decoder uses its numpy walk."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("strata.spark._recordwalk", ["src/strata/spark/_recordwalk.c"],
                             extra_compile_args=["-O2"], optional=True)])
