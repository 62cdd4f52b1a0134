#!/usr/bin/env bash
# Builds the librdkafka that sagad links statically:
#
#   deploy/build-librdkafka.sh PREFIX
#
# leaves PREFIX/include/librdkafka/{rdkafka.h,rdkafka_mock.h},
# PREFIX/lib/librdkafka.a and PREFIX/libs (the system libraries it needs on
# the link line).  A no-op when PREFIX already holds this version, built by
# this recipe.
#
# Why not Debian's librdkafka-dev: bookworm ships 2.0.2, whose cooperative
# consumer can hang for ever in rd_kafka_consumer_close when a rebalance
# lands during the close (librdkafka issue 4527, fixed in 2.4.0), so a
# worker told to stop by Kubernetes could wait out its grace period and be
# killed.  sagad uses the cooperative-sticky assignor, so it needs the fix.
#
# Where from: GitHub and the Kafka download site are not reachable from
# where sagad is built and tested, but crates.io is, and its package
# rdkafka-sys carries librdkafka's release tree under librdkafka/.  The
# package is pinned by version and sha256.  Offline: download it elsewhere
# and point SAGAD_LIBRDKAFKA_CRATE at the file.
#
# Needs a C compiler, a C++ compiler (configure refuses to run without
# one, though only the C library is built), make, curl, and the -dev packages of the features
# built in (BUILD_DEB_PKGS in the Makefile): OpenSSL (TLS, SASL SCRAM),
# zlib and zstd (compression; snappy and lz4 are built in) and libcurl
# (OAUTHBEARER OIDC).  Kerberos (SASL GSSAPI) is not built.
set -euo pipefail

RDKAFKA_VERSION=2.12.1
CRATE=rdkafka-sys-4.10.0+${RDKAFKA_VERSION}
CRATE_SHA256=e234cf318915c1059d4921ef7f75616b5219b10b46e9f3a511a15eb4b56a3f77
CRATE_URL="https://static.crates.io/crates/rdkafka-sys/${CRATE/+/%2B}.crate"

prefix=${1:?usage: deploy/build-librdkafka.sh PREFIX}
stamp="$prefix/version"
# The version and this recipe: a change to either rebuilds.
want="$RDKAFKA_VERSION $(sha256sum "$0" | cut -c1-16)"
if [ -f "$prefix/lib/librdkafka.a" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    exit 0
fi

work="$prefix.build"
rm -rf "$work"
mkdir -p "$work"
crate="${SAGAD_LIBRDKAFKA_CRATE:-$work/$CRATE.crate}"
if [ -z "${SAGAD_LIBRDKAFKA_CRATE:-}" ]; then
    echo "librdkafka: downloading $CRATE_URL"
    curl -fsSL --retry 3 --connect-timeout 20 -o "$crate" "$CRATE_URL" || {
        echo "librdkafka: cannot download $CRATE_URL; fetch it by other means and set SAGAD_LIBRDKAFKA_CRATE=/path/to/$CRATE.crate" >&2
        exit 1
    }
fi
got=$(sha256sum "$crate" | cut -d' ' -f1)
if [ "$got" != "$CRATE_SHA256" ]; then
    echo "librdkafka: $crate has sha256 $got, expected $CRATE_SHA256; not building from it" >&2
    exit 1
fi
tar -xzf "$crate" -C "$work" "$CRATE/librdkafka"
src="$work/$CRATE/librdkafka"

echo "librdkafka: building $RDKAFKA_VERSION (about a minute on two cores; log in $work/build.log)"
(
    cd "$src"
    # --enable-X makes a missing -dev package fail here, naming it, rather
    # than silently building a librdkafka without TLS or zstd.
    # Chained with &&: set -e does not hold in a subshell on the left of
    # ||, and a make after a failed configure hides its reason.
    ./configure --no-download --enable-ssl --enable-zlib --enable-zstd --enable-curl \
        --disable-gssapi --disable-lz4-ext &&
        make -C src -j"$(nproc)" librdkafka.a
) >"$work/build.log" 2>&1 || {
    tail -30 "$work/build.log" >&2
    echo "librdkafka: build failed; the full log is $work/build.log (make deps installs what it needs)" >&2
    exit 1
}

# librdkafka carries its own copy of cJSON under cJSON's own names; linked
# statically beside Debian's libcjson, sagad's cJSON calls would bind to
# whichever the linker met first.  Its copy is renamed rd_kafka_cJSON_*
# (definitions and librdkafka's own calls alike), so sagad gets libcjson.
nm -g --defined-only "$src/src/librdkafka.a" 2>/dev/null |
    awk 'NF == 3 && $3 ~ /^cJSON_/ {print $3, "rd_kafka_" $3}' | sort -u >"$work/cjson.map"
objcopy --redefine-syms="$work/cjson.map" "$src/src/librdkafka.a"
if nm -g --defined-only "$src/src/librdkafka.a" 2>/dev/null | awk 'NF == 3 {print $3}' | grep -q '^cJSON_'; then
    echo "librdkafka: cJSON symbols still exported after renaming" >&2
    exit 1
fi

rm -rf "$prefix"
mkdir -p "$prefix/include/librdkafka" "$prefix/lib"
cp "$src/src/rdkafka.h" "$src/src/rdkafka_mock.h" "$prefix/include/librdkafka/"
cp "$src/src/librdkafka.a" "$prefix/lib/"
cp "$src/LICENSE" "$src/LICENSES.txt" "$prefix/"
# The system libraries configure found and linked the library against.
sed -n 's/^MKL_DYNAMIC_LIBS=[[:space:]]*//p' "$src/Makefile.config" >"$prefix/libs"
[ -s "$prefix/libs" ] || { echo "librdkafka: no MKL_DYNAMIC_LIBS in $src/Makefile.config" >&2; exit 1; }
echo "$want" >"$stamp"
rm -rf "$work"
echo "librdkafka: $RDKAFKA_VERSION in $prefix"
