"""A local Spark session set up for kayak's pipeline (``local[2]`` by default)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["local_spark"]

_LOG4J = Path(__file__).with_name("log4j2.properties")


def local_spark(
    master: str = "local[2]", app_name: str = "kayak-pipeline", **settings: str
) -> Any:
    """A SparkSession on this machine with kayak's data source registered.

    Spark's workers run this interpreter (so they import the same kayak); its console
    logging is reduced to errors, its UI is off, two shuffle partitions, Python workers
    reused between tasks, UTC session time zone. ``settings`` are more Spark properties
    (``spark.driver.memory``, ...).
    """
    from pyspark.sql import SparkSession

    import kayak.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    java_options = f"-Dlog4j2.configurationFile=file:{_LOG4J}"
    config = {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": java_options,
        "spark.executor.extraJavaOptions": java_options,
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        **settings,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for name, value in config.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kayak.spark.register(spark)
    return spark
