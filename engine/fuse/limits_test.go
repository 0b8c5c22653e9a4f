package fuse

import (
	"testing"

	"github.com/tlite/tlite/kernels"
)

// TestGroupLimitsFitChainKernel ties the fusion caps to the chain kernel's
// argument limits: the largest group Elementwise may form must compile to a
// kernel within 255 arguments and 1 KiB of them, the bound phones
// guarantee, so raising a cap cannot silently produce kernels a phone
// rejects.
func TestGroupLimitsFitChainKernel(t *testing.T) {
	if err := kernels.ChainFits(maxGroupInputs, maxGroupOutputs); err != nil {
		t.Fatalf("largest fused group (%d inputs, %d outputs): %v", maxGroupInputs, maxGroupOutputs, err)
	}
	if maxGroupRank > 6 {
		t.Fatalf("maxGroupRank %d exceeds the chain kernels' 6 dimensions", maxGroupRank)
	}
	n, b := kernels.ChainKernelArgs(maxGroupInputs, maxGroupOutputs)
	t.Logf("largest fused group: %d kernel arguments, %d bytes (limits %d, %d)", n, b, kernels.MaxKernelParams, kernels.MaxKernelParamBytes)
}
