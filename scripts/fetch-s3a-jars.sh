#!/usr/bin/env bash
# Puts Hadoop's S3A filesystem jars where Floe's Spark session finds them, so that
# Iceberg tables can live on S3-compatible object storage (s3:// and s3a:// locations).
#
#   scripts/fetch-s3a-jars.sh [DEST_DIR] [PIP]     (defaults: .venv/share/floe/jars, .venv/bin/pip)
#
# The jars (hadoop-aws 3.3.1, matching PySpark 3.5's Hadoop client, and the AWS SDK v1
# bundle it needs) are not on PyPI on their own; they ship inside the sdist of
# sagemaker-pyspark 1.4.5 (deps/jars/, ~181 MB). pip downloads it (through pip's own
# cache: a second download is local), the two jars are extracted and their SHA-256
# checked. Idempotent: does nothing when both jars are already in DEST_DIR and intact.
set -euo pipefail

dest="${1:-.venv/share/floe/jars}"
pip="${2:-.venv/bin/pip}"
sdist=sagemaker-pyspark==1.4.5
declare -A sha256=(
  [hadoop-aws-3.3.1.jar]=6be50ad8a8b445d2802381b085b2a3ede5c29d353450a6a21f16b2fefa962b6e
  [aws-java-sdk-bundle-1.11.901.jar]=b87175b32a16544cc1b37cf40390eb375833e62bed67f8ce6cde4b7ad6429ead
)

intact() {
  local jar
  for jar in "${!sha256[@]}"; do
    [ -f "$dest/$jar" ] || return 1
    echo "${sha256[$jar]}  $dest/$jar" | sha256sum --check --status || return 1
  done
}

if intact; then exit 0; fi

echo "fetching the S3A jars ($sdist from PyPI) into $dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$pip" download --quiet --no-deps --no-binary :all: "$sdist" -d "$tmp"
members=()
for jar in "${!sha256[@]}"; do members+=("sagemaker_pyspark-1.4.5/deps/jars/$jar"); done
tar -xzf "$tmp"/sagemaker_pyspark-1.4.5.tar.gz -C "$tmp" "${members[@]}"
mkdir -p "$dest"
for jar in "${!sha256[@]}"; do
  echo "${sha256[$jar]}  $tmp/sagemaker_pyspark-1.4.5/deps/jars/$jar" | sha256sum --check --quiet
  mv "$tmp/sagemaker_pyspark-1.4.5/deps/jars/$jar" "$dest/$jar"
done
