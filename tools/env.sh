# Sourced by tlite's scripts: puts a suitable Go on PATH and sets the cgo flags
# the OpenCL bindings need.
for d in /usr/local/go-1.26.8/bin /usr/local/go/bin; do
  [ -x "$d/go" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH="$d:$PATH" ;; esac
done
export PATH
export CGO_CFLAGS="${CGO_CFLAGS:--DCL_TARGET_OPENCL_VERSION=300}"
# PoCL compiles each kernel again for every new local size unless told not to;
# the specialisation gains nothing measurable here (see machine-facts).
export POCL_WORK_GROUP_SPECIALIZATION="${POCL_WORK_GROUP_SPECIALIZATION:-0}"
