// Filling a buffer with one 32-bit word (Tensor::full on CUDA; src/ops/assign.rs).
// assign itself needs no kernel: it is a device-to-device copy on the stream.
//
// fill_u32: thread per element (grid-stride): out[i] = word (an f32's bits or a u32).

extern "C" __global__ void fill_u32(u32* out, u32 word, u32 n) {
    FOR_EACH(i, n) out[i] = word;
}
