// common.cl is prepended to every kernel family's source.
//
// Activations live in device memory as fp32 or fp16 ("storage"), chosen per
// build with -DSTORAGE_F16. Arithmetic is always fp32 so that devices without
// cl_khr_fp16 (PoCL here, some older GPUs) run the same source: vload_half and
// vstore_half_rte are core OpenCL C 1.2 and convert on the fly.
#ifdef STORAGE_F16
typedef half store_t;
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half_rte((v), (i), (p))
#else
typedef float store_t;
#define LOAD(p, i) ((p)[(i)])
#define STORE(p, i, v) ((p)[(i)] = (v))
#endif

// Weights may be stored differently from activations (fp16 weights in an fp32
// model): WLOAD reads them, chosen by -DWEIGHT_F16.
#ifdef WEIGHT_F16
typedef half wstore_t;
#define WLOAD(p, i) vload_half((i), (p))
#else
typedef float wstore_t;
#define WLOAD(p, i) ((p)[(i)])
#endif
