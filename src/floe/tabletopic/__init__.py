"""Table topics: topics continuously materialized as Apache Iceberg tables.

Foundation so far: the catalog shared by Spark and pyiceberg (:mod:`.catalog`) and the
process's SparkSession (:mod:`.spark`, the only package that imports pyspark). The
commit pipeline is not implemented yet (see docs/table-topics.md).
"""
