#!/usr/bin/env bash
# Installs the Debian packages Floe needs, only when they are missing.
#   runtime: a Java 17 runtime (the table-topic pipeline runs Spark on it) and the
#            SQLite JDBC driver Spark uses for the embedded Iceberg catalog
#   test:    kcat, one of the real Kafka clients the test suite drives, and a
#            PostgreSQL 15 server + its JDBC driver for the PostgreSQL catalog test,
#            and Chromium + its driver for the console's browser tests (Playwright
#            launches /usr/bin/chromium; it never downloads a browser of its own),
#            and a JDK 17 (javac) to compile the Apache Kafka Java client test program
#            (tests/java; tests/helpers/java.py fetches the client jars themselves),
#            and libfaketime, the chaos suite's clock-offset nemesis (tests/chaos)
set -euo pipefail

need=()
case "${1:-runtime}" in
  runtime)
    if ! java -version 2>&1 | grep -qE 'version "17'; then need+=(openjdk-17-jre-headless); fi
    if [ ! -e /usr/share/java/sqlite-jdbc.jar ]; then need+=(libxerial-sqlite-jdbc-java); fi
    ;;
  test)
    if ! command -v kcat >/dev/null 2>&1; then need+=(kcat); fi
    if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then need+=(postgresql); fi
    if [ ! -e /usr/share/java/postgresql.jar ]; then need+=(libpostgresql-jdbc-java); fi
    if [ ! -x /usr/bin/chromium ]; then need+=(chromium); fi
    if [ ! -x /usr/bin/chromedriver ]; then need+=(chromium-driver); fi
    if ! command -v javac >/dev/null 2>&1; then need+=(openjdk-17-jdk-headless); fi
    if ! command -v faketime >/dev/null 2>&1; then need+=(faketime); fi
    ;;
  *) echo "usage: $0 runtime|test" >&2; exit 2 ;;
esac

if [ ${#need[@]} -eq 0 ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
