"""What every test module that runs Spark in the pytest process shares."""

import pytest

SPARK_WARNING_FILTERS = [
    # py4j leaves its gateway sockets to the garbage collector
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    # pyspark 3.5 checks the pandas version with distutils.LooseVersion
    pytest.mark.filterwarnings("ignore:distutils Version classes:DeprecationWarning"),
]
