// Fused elementwise kernels of sparkdbn's GPU branch (compiled once per host by NVRTC through
// cupy.RawModule and kept in the kernel cache).  Every kernel has a numpy twin of the same
// name in rbm/_gpu/_reference.py; tests/rbm/test_gpu.py checks them against each other.
// Arrays are C-contiguous; `cols` is the length of the last axis (bias index = i % cols).
// Random draws: Philox4x32-10 with counter (offset + i, 0, 0) -- see rbm/_gpu/_philox.py.

__device__ __forceinline__ void philox(unsigned long long index, unsigned int k0, unsigned int k1,
                                       unsigned int w[4]) {
    unsigned int c0 = (unsigned int)index, c1 = (unsigned int)(index >> 32), c2 = 0u, c3 = 0u;
    for (int round = 0; round < 10; ++round) {
        unsigned int hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        unsigned int hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}

template <typename T> __device__ __forceinline__ T uniform_of(unsigned int w0, unsigned int w1);
template <> __device__ __forceinline__ float uniform_of<float>(unsigned int w0, unsigned int w1) {
    return (float)(w0 >> 8) * 5.9604644775390625e-08f;  // 2**-24
}
template <> __device__ __forceinline__ double uniform_of<double>(unsigned int w0, unsigned int w1) {
    return (double)(((unsigned long long)w0 << 21) | (unsigned long long)(w1 >> 11)) * 1.1102230246251565e-16;  // 2**-53
}

template <typename T> __device__ __forceinline__ T uniform_at(unsigned long long index, unsigned int k0, unsigned int k1) {
    unsigned int w[4];
    philox(index, k0, k1, w);
    return uniform_of<T>(w[0], w[1]);
}

__device__ __forceinline__ double normal_at(unsigned long long index, unsigned int k0, unsigned int k1) {
    unsigned int w[4];
    philox(index, k0, k1, w);
    double u1 = uniform_of<double>(w[0], w[1]), u2 = uniform_of<double>(w[2], w[3]);
    return sqrt(-2.0 * log1p(-u1)) * cos(6.283185307179586 * u2);
}

template <typename T> __device__ __forceinline__ T sigmoid(T x) {
    return (T)0.5 * tanh((T)0.5 * x) + (T)0.5;  // never overflows; the CPU branch's formula
}

#define FOR_EACH(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)blockDim.x * gridDim.x)

template <typename T>
__global__ void fill_uniform(T* out, long long n, unsigned int k0, unsigned int k1, unsigned long long offset) {
    FOR_EACH(i, n) out[i] = uniform_at<T>(offset + i, k0, k1);
}

template <typename T>
__global__ void fill_normal(T* out, long long n, unsigned int k0, unsigned int k1, unsigned long long offset) {
    FOR_EACH(i, n) out[i] = (T)normal_at(offset + i, k0, k1);
}

// x <- scale * sigmoid(x + bias)
template <typename T>
__global__ void bias_sigmoid(T* x, const T* bias, long long n, int cols, T scale) {
    FOR_EACH(i, n) x[i] = scale * sigmoid<T>(x[i] + bias[i % cols]);
}

// p = sigmoid(x + bias); x <- scale * p; sample <- (u < p) as 0/1 (sample may be x: it is written last)
template <typename T>
__global__ void bias_sigmoid_sample(T* x, const T* bias, T* sample, long long n, int cols, T scale,
                                    unsigned int k0, unsigned int k1, unsigned long long offset) {
    FOR_EACH(i, n) {
        T p = sigmoid<T>(x[i] + bias[i % cols]);
        x[i] = scale * p;
        sample[i] = uniform_at<T>(offset + i, k0, k1) < p ? (T)1 : (T)0;
    }
}

// x <- (u < x) as 0/1
template <typename T>
__global__ void sample_inplace(T* x, long long n, unsigned int k0, unsigned int k1, unsigned long long offset) {
    FOR_EACH(i, n) x[i] = uniform_at<T>(offset + i, k0, k1) < x[i] ? (T)1 : (T)0;
}

// x <- x + bias
template <typename T>
__global__ void bias_add(T* x, const T* bias, long long n, int cols) {
    FOR_EACH(i, n) x[i] = x[i] + bias[i % cols];
}

// x <- (x + bias) + standard normal noise
template <typename T>
__global__ void bias_add_normal(T* x, const T* bias, long long n, int cols,
                                unsigned int k0, unsigned int k1, unsigned long long offset) {
    FOR_EACH(i, n) x[i] = (x[i] + bias[i % cols]) + (T)normal_at(offset + i, k0, k1);
}

// velocity <- momentum * velocity + grad_scale * grad; param <- param + velocity
template <typename T>
__global__ void momentum_step(T* param, T* velocity, const T* grad, long long n, T momentum, T grad_scale) {
    FOR_EACH(i, n) {
        T v = velocity[i] * momentum + grad[i] * grad_scale;
        velocity[i] = v;
        param[i] = param[i] + v;
    }
}

// x <- x - a * y
template <typename T>
__global__ void subtract_scaled(T* x, const T* y, long long n, T a) {
    FOR_EACH(i, n) x[i] = x[i] - y[i] * a;
}

// Inverted dropout: out <- a * ((u < keep) / keep)
template <typename T>
__global__ void dropout(const T* a, T* out, long long n, T keep, T inverse_keep,
                        unsigned int k0, unsigned int k1, unsigned long long offset) {
    FOR_EACH(i, n) out[i] = a[i] * (uniform_at<T>(offset + i, k0, k1) < keep ? inverse_keep : (T)0);
}

// Through a sigmoid layer whose (dropped-out) output is d and activation a: g <- g * d * (1 - a)
template <typename T>
__global__ void sigmoid_backward(T* g, const T* d, const T* a, long long n) {
    FOR_EACH(i, n) g[i] = (g[i] * d[i]) * ((T)1 - a[i]);
}

// SGD with momentum (and L2 on this parameter when l2 != 0): g' = g + l2 w; v <- mu v - lr g';
// w <- w + v (Nesterov: w <- w + mu v - lr g')
template <typename T>
__global__ void sgd_step(T* param, T* velocity, const T* grad, long long n, T momentum, T lr, T l2, int nesterov) {
    FOR_EACH(i, n) {
        T g = l2 != (T)0 ? grad[i] + l2 * param[i] : grad[i];
        T v = velocity[i] * momentum - lr * g;
        velocity[i] = v;
        param[i] = nesterov ? param[i] + (momentum * v - lr * g) : param[i] + v;
    }
}

// Adagrad: h <- h + g'^2; w <- w - lr g' / (sqrt(h) + eps)
template <typename T>
__global__ void adagrad_step(T* param, T* history, const T* grad, long long n, T lr, T eps, T l2) {
    FOR_EACH(i, n) {
        T g = l2 != (T)0 ? grad[i] + l2 * param[i] : grad[i];
        T h = history[i] + g * g;
        history[i] = h;
        param[i] = param[i] - lr * g / (sqrt(h) + eps);
    }
}

// Adam: m <- b1 m + (1 - b1) g'; v <- b2 v + (1 - b2) g'^2; w <- w - step m / (sqrt(v) + eps)
template <typename T>
__global__ void adam_step(T* param, T* m, T* v, const T* grad, long long n, T beta1, T beta2, T one_minus_beta1,
                          T one_minus_beta2, T step, T eps, T l2) {
    FOR_EACH(i, n) {
        T g = l2 != (T)0 ? grad[i] + l2 * param[i] : grad[i];
        T mi = m[i] * beta1 + one_minus_beta1 * g;
        T vi = v[i] * beta2 + one_minus_beta2 * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = param[i] - step * mi / (sqrt(vi) + eps);
    }
}

// Max pooling on (A, H, W, B) arrays, the batch innermost; positions outside the input are skipped
// (the -inf padding of the CPU branch).
template <typename T>
__global__ void maxpool_forward(const T* x, T* out, long long n, int h, int w, int b, int oh, int ow,
                                int kh, int kw, int sy, int sx, int ph, int pw) {
    FOR_EACH(i, n) {  // i over (A, OH, OW, B)
        long long rest = i;
        int bi = (int)(rest % b); rest /= b;
        int ox = (int)(rest % ow); rest /= ow;
        int oy = (int)(rest % oh); rest /= oh;
        long long plane = rest * h;
        T best = (T)0;
        bool any = false;  // padding is at most half the window: every window sees an input
        for (int ky = 0; ky < kh; ++ky) {
            int y = oy * sy + ky - ph;
            if (y < 0 || y >= h) continue;
            for (int kx = 0; kx < kw; ++kx) {
                int xx = ox * sx + kx - pw;
                if (xx < 0 || xx >= w) continue;
                T value = x[((plane + y) * w + xx) * b + bi];
                best = (!any || value > best) ? value : best;
                any = true;
            }
        }
        out[i] = best;
    }
}

// The gradient of each output goes to the first input of its window (row-major) equal to the max.
// disjoint (stride >= window): each thread also writes the zeros of its own window; otherwise dx
// must arrive zeroed and the winners are added atomically.
template <typename T>
__global__ void maxpool_backward(const T* x, const T* out, const T* dout, T* dx, long long n, int h, int w, int b,
                                 int oh, int ow, int kh, int kw, int sy, int sx, int ph, int pw, int disjoint) {
    FOR_EACH(i, n) {
        long long rest = i;
        int bi = (int)(rest % b); rest /= b;
        int ox = (int)(rest % ow); rest /= ow;
        int oy = (int)(rest % oh); rest /= oh;
        long long plane = rest * h;
        T best = out[i];
        bool found = false;
        for (int ky = 0; ky < kh; ++ky) {
            int y = oy * sy + ky - ph;
            if (y < 0 || y >= h) continue;
            for (int kx = 0; kx < kw; ++kx) {
                int xx = ox * sx + kx - pw;
                if (xx < 0 || xx >= w) continue;
                long long j = ((plane + y) * w + xx) * b + bi;
                bool win = !found && x[j] == best;
                found = found || win;
                if (disjoint) dx[j] = win ? dout[i] : (T)0;
                else if (win) atomicAdd(dx + j, dout[i]);
            }
        }
    }
}

// Conv output (F, P) with P = OH*OW*N: z <- act(z + bias[f]); act 0 identity, 1 relu, 2 sigmoid, 3 tanh
template <typename T>
__global__ void bias_activation(T* z, const T* bias, long long n, long long per_channel, int activation) {
    FOR_EACH(i, n) {
        T v = z[i] + bias[i / per_channel];
        if (activation == 1) v = v > (T)0 ? v : (T)0;
        else if (activation == 2) v = (T)1 / ((T)1 + exp(-v));
        else if (activation == 3) v = tanh(v);
        z[i] = v;
    }
}

// dz <- dy * act'(y) from the activation's output y; act 0 identity, 1 relu, 2 sigmoid, 3 tanh
template <typename T>
__global__ void activation_backward(const T* y, const T* dy, T* dz, long long n, int activation) {
    FOR_EACH(i, n) {
        T g = dy[i];
        if (activation == 1) g = y[i] > (T)0 ? g : (T)0;
        else if (activation == 2) g = g * y[i] * ((T)1 - y[i]);
        else if (activation == 3) g = g * ((T)1 - y[i] * y[i]);
        dz[i] = g;
    }
}

// Softmax cross-entropy of logits z (rows, classes) (+ bias over the classes when has_bias), in ONE
// block of 256 threads (a thread per row at a time): grad <- (softmax - onehot(labels)) * inv_n
// (grad may be z), loss[0] <- inv_n * sum of the rows' losses, and total[0] += that sum when
// has_total.  The block's sum is a fixed tree: the same bits on every run.
template <typename T>
__global__ void softmax_xent(const T* z, const T* bias, int has_bias, const long long* labels, T* grad, T* loss,
                             T* total, int has_total, long long rows, int classes, T inv_n) {
    __shared__ T partial[256];
    T own = (T)0;
    for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
        const T* zr = z + r * classes;
        T* gr = grad + r * classes;
        T top = zr[0] + (has_bias ? bias[0] : (T)0);
        for (int k = 1; k < classes; ++k) {
            T v = zr[k] + (has_bias ? bias[k] : (T)0);
            top = v > top ? v : top;
        }
        T sum = (T)0;
        for (int k = 0; k < classes; ++k) sum += exp(zr[k] + (has_bias ? bias[k] : (T)0) - top);
        long long label = labels[r];
        own += log(sum) - (zr[label] + (has_bias ? bias[label] : (T)0) - top);
        for (int k = 0; k < classes; ++k) {
            T p = exp(zr[k] + (has_bias ? bias[k] : (T)0) - top) / sum;
            gr[k] = (p - (k == label ? (T)1 : (T)0)) * inv_n;
        }
    }
    partial[threadIdx.x] = own;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        loss[0] = partial[0] * inv_n;
        if (has_total) total[0] += partial[0];
    }
}

// out[c] <- sum over r of x[r, c] (times weights[r] when has_weights), x (rows, cols).  Blocks of
// 32 x 8 threads: a column per x-thread, the rows split over 8 y-threads, then summed in order.
template <typename T>
__global__ void column_sums(const T* x, const T* weights, int has_weights, T* out, long long rows, int cols) {
    __shared__ T partial[8][33];
    int col = blockIdx.x * 32 + threadIdx.x;
    T own = (T)0;
    if (col < cols) {
        for (long long r = threadIdx.y; r < rows; r += 8) own += x[r * cols + col] * (has_weights ? weights[r] : (T)1);
    }
    partial[threadIdx.y][threadIdx.x] = own;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        T sum = (T)0;
        for (int y = 0; y < 8; ++y) sum += partial[y][threadIdx.x];
        out[col] = sum;
    }
}

// out[r] <- sum over c of x[r, c], x (rows, cols): a block of 256 threads per row, a fixed tree.
template <typename T>
__global__ void row_sums(const T* x, T* out, long long cols) {
    __shared__ T partial[256];
    const T* xr = x + (long long)blockIdx.x * cols;
    T own = (T)0;
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) own += xr[c];
    partial[threadIdx.x] = own;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
