# Sourced by tlite's scripts: puts a suitable Go on PATH (/usr/local/go, or
# Debian's newest golang-1.x) and lets it switch to the toolchain go.mod
# names when it is older (GOTOOLCHAIN=auto; Debian's go.env may say local).
for d in $(ls -d /usr/lib/go-1.*/bin 2>/dev/null | sort -V) /usr/local/go-1.26.8/bin /usr/local/go/bin; do
  [ -x "$d/go" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH="$d:$PATH" ;; esac
done
export PATH
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
# PoCL compiles each kernel again for every new local size unless told not to;
# the specialisation gains nothing measurable here (see machine-facts).
export POCL_WORK_GROUP_SPECIALIZATION="${POCL_WORK_GROUP_SPECIALIZATION:-0}"
