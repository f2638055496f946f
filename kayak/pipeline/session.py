"""A local Spark session set up for kayak's pipeline (``local[2]`` by default)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["local_spark"]

_LOG4J = Path(__file__).with_name("log4j2.properties")


def local_spark(master: str = "local[2]", app_name: str = "kayak-pipeline") -> Any:
    """A SparkSession on this machine with kayak's data source registered.

    Spark's workers run this interpreter (so they import the same kayak); its console
    logging is reduced to errors and its UI is off.
    """
    from pyspark.sql import SparkSession

    import kayak.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    java_options = f"-Dlog4j2.configurationFile=file:{_LOG4J}"
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kayak.spark.register(spark)
    return spark
