package flash_test

import (
	"fmt"
	"log"

	"github.com/tlite/tlite/engine/flash"
)

// A layer-major swap file read one batch per layer, as the LLMS I/O thread
// does: the compute side waits for layer l's batch while later layers'
// reads are still in flight.
func Example() {
	stats := flash.NewStats()
	f, err := flash.Open("/var/lib/tlite/ctx-1.swap", flash.Options{Stats: stats})
	if err != nil {
		log.Fatal(err) // on tmpfs: flash.ErrNoDirect
	}
	defer f.Close()
	pool, err := flash.NewPool(4)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	check, err := flash.StartDeviceCheck(stats)
	if err != nil {
		log.Fatal(err)
	}
	const layers, layerBytes = 4, 1 << 20
	var batches []*flash.Batch
	for l := range layers {
		dst := flash.AlignedBuf(layerBytes)
		batches = append(batches, pool.Submit([]flash.Request{{File: f, Off: int64(l * layerBytes), Dst: dst}}))
	}
	for l, b := range batches {
		if err := b.Wait(); err != nil {
			log.Fatal(err)
		}
		fmt.Println("layer", l, "ready") // release the layer gate here
	}
	if _, _, err := check.Verify(); err != nil {
		log.Fatal(err)
	}
	s := stats.Snapshot()
	fmt.Printf("%s: %d reads, %d bytes, p95 %v, mean run %.0f bytes\n",
		s.Label, s.Read.Ops, s.Read.Bytes, s.Read.Latency.P95, s.Read.MeanRunBytes)
}
