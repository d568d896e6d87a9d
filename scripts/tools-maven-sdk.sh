#!/usr/bin/env bash
# Builds a Maven-built Segment SDK driver, test/sdk/<lang> (java: analytics-java, kotlin: analytics-kotlin;
# the SDK pinned in its pom.xml), into the git-ignored .tools/<lang>-sdk/driver.jar, for test/ingest/sdk-<lang>.test.ts.
# Usage: bash scripts/tools-maven-sdk.sh java|kotlin
# Maven's local repository is .tools/m2, so a CI cache of .tools keeps the downloads.
# Idempotent: skipped while the jar is newer than every file of the project.
set -euo pipefail
cd "$(dirname "$0")/.."

lang="${1:?usage: tools-maven-sdk.sh java|kotlin}"
src="$PWD/test/sdk/$lang"
[ -f "$src/pom.xml" ] || { echo "tools: no Maven driver in test/sdk/$lang" >&2; exit 1; }
dir="$PWD/.tools/$lang-sdk"
out="$dir/driver.jar"

if [ -f "$out" ] && [ -z "$(find "$src" -type f -newer "$out" -not -path "$src/target/*" -print -quit)" ]; then
  exit 0
fi
need() {
  echo "tools: $1 is needed to build the analytics-$lang driver in test/sdk/$lang (for test/ingest/sdk-$lang.test.ts): $2" >&2
  exit 1
}
# A JDK and Maven from apt when missing (Debian's default JDK is 17 or newer).
if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
  bash scripts/apt-install.sh default-jdk-headless maven || true
  hash -r
fi
command -v java >/dev/null || need "Java >= 17" "install a JDK (e.g. apt-get install default-jdk-headless) or put java on PATH"
command -v mvn >/dev/null || need "Maven >= 3.6" "install Maven (e.g. apt-get install maven) or put mvn on PATH"

echo "tools: building .tools/$lang-sdk/driver.jar (analytics-$lang, see test/sdk/$lang/pom.xml)" >&2
mkdir -p "$dir" "$PWD/.tools/m2"
# Built outside the source tree, then moved into place: a test never runs a half-written jar, and the
# new file's time is always after the sources'.
build=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$build"' EXIT
# Debian's Maven 3.8 prints bare colour resets even in quiet batch mode: stripped, with empty lines.
# --strict-checksums: a download whose checksum does not match fails the build (by default Maven
# only warns, and -q hides the warning).
mvn -q -B --strict-checksums -Dstyle.color=never -f "$src/pom.xml" -Dmaven.repo.local="$PWD/.tools/m2" -Ddriver.buildDirectory="$build" package 2>&1 \
  | sed -e 's/\x1b\[0m//g' -e '/^[[:space:]]*$/d' >&2
# $build is inside $dir: one atomic rename.
mv -f "$build/driver.jar" "$out"
