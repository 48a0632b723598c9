"""Installs hmp: heterogeneous model- and data-parallel CNN training on Mesh-TensorFlow.

TensorFlow's CPU build is the default. For GPUs set ``HMP_TENSORFLOW=tensorflow``
and install the ``gpu`` extra (see README): the CPU and GPU wheels share files,
so exactly one of them must be installed.
"""

import os
import re

from setuptools import find_packages, setup

TENSORFLOW = os.environ.get("HMP_TENSORFLOW", "tensorflow-cpu")
TF_VERSIONS = ">=2.15,<2.22"
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "hmp", "__init__.py")) as init:
    VERSION = re.search(r'^__version__ = "([^"]+)"', init.read(), re.M).group(1)

setup(
    name="hmp",
    version=VERSION,
    description="Heterogeneous model/data parallel CNN training for hyperspectral images",
    packages=find_packages(include=["hmp", "hmp.*", "models", "models.*"]),
    python_requires=">=3.10",
    install_requires=[
        TENSORFLOW + TF_VERSIONS,
        "mesh-tensorflow==0.1.21",
        "numpy",
        "absl-py",
        "scipy",
        "matplotlib",
        "h5py",
        "spectral",      # ENVI files (pure Python)
        "tensorboard",   # tensorflow-cpu does not bring it
    ],
    extras_require={
        # the tests on every core (half the time on 2); the format tests need rasterio
        "test": ["pytest", "pytest-xdist", "rasterio"],
        "formats": ["rasterio"],   # GeoTIFF and other GDAL rasters (brings GDAL's wheels)
        "baselines": ["scikit-learn"],
        "gpu": ["tensorflow[and-cuda]" + TF_VERSIONS],
    },
)
