"""Spark for table topics: the only package that imports pyspark (lazily).

:class:`SparkManager` owns the process's one SparkSession.
"""

from floe.tabletopic.spark.session import SparkManager, SparkSettings, SparkUnavailableError

__all__ = ["SparkManager", "SparkSettings", "SparkUnavailableError"]
