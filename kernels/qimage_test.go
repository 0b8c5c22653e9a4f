package kernels

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/quant"
)

// TestMatMulQTile4Images runs the tiled decode GEMV (qmt_r1) with its
// weight read through images, forced on PoCL (which has images), and
// checks every output bit for bit against the buffer path: both formats,
// groups of 32 (a group per chunk) and 128, both storages, a bias in
// either storage, 1 to 3 rows, N leaving the last block of four partly
// empty, and a weight that starts inside its buffer. It also checks that
// the image build ran, and that a weight whose arrays do not start on a
// texel falls back to buffers.
func TestMatMulQTile4Images(t *testing.T) {
	if !testLib.Device().Info().Images {
		t.Skip("the device has no images")
	}
	defer func() { imgForce = 0 }()
	for _, tc := range []struct {
		f     quant.Format
		group int
		s, bs Storage
		k, n  int
	}{
		{quant.E0M4, 128, F32, F32, 3 * 128, 37},
		{quant.Int4, 32, F32, F16, 5 * 32, 9},
		{quant.E0M4, 32, F16, F16, 7 * 32, 6},
		{quant.Int4, 128, F16, F32, 2 * 128, 13},
	} {
		_, wp := qWeight(t, int64(tc.k+tc.n), tc.f, tc.k, tc.n, tc.group)
		wq := uploadQTile4(t, wp)
		for m := 1; m <= 3; m++ {
			name := fmt.Sprintf("%s/G%d/%s/bias %s/M%d", tc.f, tc.group, tc.s, tc.bs, m)
			p := QMatMulParams{M: m, N: tc.n, K: tc.k, BiasStorage: tc.bs}
			run := func(force int) []float32 {
				imgForce = force
				got, _ := qRun(t, tc.s, wq, wp, p, true)
				return got
			}
			img, buf := run(1), run(-1)
			for i := range buf {
				if math.Float32bits(img[i]) != math.Float32bits(buf[i]) {
					t.Fatalf("%s: output %d: images %g, buffers %g", name, i, img[i], buf[i])
				}
			}
		}
	}
	built := false
	for key := range testLib.progs {
		built = built || strings.HasPrefix(key, "quant\x00") && strings.HasSuffix(key, " -DQ_IMG")
	}
	if !built {
		t.Error("no image build of the quant program: the image path did not run")
	}

	// Arrays that do not start on a four-word texel read buffers.
	imgForce = 1
	_, wp := qWeight(t, 3, quant.E0M4, 128, 8, 128)
	wq := uploadQTile4(t, wp)
	g := qmm{w: wq, m: 1}
	if !testLib.qImages(g) {
		t.Fatal("an aligned tiled weight does not read images under the force")
	}
	g.w.Q.Off++
	if testLib.qImages(g) {
		t.Error("codes at word 1 read through images")
	}
	g.w.Q.Off--
	g.w.Layout = QLayoutColumns
	if testLib.qImages(g) {
		t.Error("the columns layout read through images")
	}
}

// TestImagesPolicy: on the published devices with images (their lists do
// not carry CL_DEVICE_IMAGE_SUPPORT; every one of them has images), the
// tiled decode GEMV reads images on the Adreno only, and no device reads
// them without image support or against the test override.
func TestImagesPolicy(t *testing.T) {
	defer func() { imgForce = 0 }()
	for _, tc := range []struct {
		file string
		want bool
	}{
		{"adreno730.txt", true},
		{"mali-g72.txt", false},
		{"nvidia-rtx3050.txt", false},
	} {
		d := readPublishedDevice(t, filepath.Join("testdata", "devices", tc.file))
		inf := d.info
		inf.Images, inf.ImageMaxBuffer = true, 1<<27
		l := &Lib{dev: testLib.dev, as: &inf}
		imgForce = 0
		if got := l.imagesFaster(); got != tc.want {
			t.Errorf("%s: images faster = %v, want %v", tc.file, got, tc.want)
		}
		imgForce = -1
		if l.imagesFaster() {
			t.Errorf("%s: images read against the override", tc.file)
		}
		imgForce = 0
		inf.Images = false
		if l.imagesFaster() {
			t.Errorf("%s: images read on a device without them", tc.file)
		}
	}
}
