/*
 * model.h - the trainer's multilayer perceptron: Linear layers, each hidden
 * one followed by BatchNorm1d (optional; SyncBatchNorm across ranks as an
 * option) and ReLU, and a softmax cross-entropy loss. Every tensor lives in
 * device memory through a struct kernel_ops, so the same code runs on the
 * CPU and on a GPU.
 *
 * Parameters are stored back to back in one flat buffer (params) in forward
 * order, layer by layer (weight, bias, then BatchNorm weight and bias), with
 * the gradients at the same offsets in a second flat buffer (grads). The
 * BatchNorm running statistics live in a third one (buffers). Names follow
 * PyTorch's nn.Sequential numbering, so a checkpoint reads like a torch
 * state_dict: "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
 * "1.running_var", "3.weight", ... (Linear, BatchNorm1d, ReLU per hidden
 * layer; without BatchNorm: Linear, ReLU).
 */
#ifndef DDP_WORKER_TRAIN_MODEL_H
#define DDP_WORKER_TRAIN_MODEL_H

#include "kernels.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MODEL_MAX_LAYERS 16
#define MODEL_NAME_MAX	 48

/* Communication the model needs from its caller (libddp in ddp-train;
 * nothing in a single-process test). Every callback may be NULL. */
struct model_comm {
	void *arg;
	/* SyncBatchNorm: in-place SUM all-reduce of n device floats across
	 * ranks; `world` ranks take part (global batch = rows * world). */
	int (*allreduce_sum)(void *arg, float *buf, size_t n);
	int world;
	/* Called in backward as soon as tensor `index` (model tensor table
	 * order) has its final gradient, so its all-reduce can start. */
	int (*grad_ready)(void *arg, int index);
	/* Memory of the flat gradient buffer (NULL: the kernels' alloc and
	 * free). ddp-train takes it from libddp (ddp_mem_alloc), whose reducer
	 * all-reduces it in place, bucket by bucket: on the shared-memory
	 * transport, across ranks without staging copies. */
	int (*grads_alloc)(void *arg, size_t bytes, void **out);
	void (*grads_free)(void *arg, void *ptr);
};

/* One named tensor of the model. */
struct model_tensor {
	char name[MODEL_NAME_MAX];
	int ndim;
	int shape[2];
	size_t numel;
	size_t offset;	/* in params (and grads), or in buffers if is_buffer */
	bool is_buffer; /* BatchNorm running statistic: no gradient */
	bool decay;	/* true for Linear weights (the weight-decay group) */
};

struct model_layer {
	int in, out;
	bool hidden;			    /* followed by (BatchNorm and) ReLU */
	int w, b, gamma, beta, rmean, rvar; /* tensor indexes, -1 if absent */
	float *act;			    /* max_batch x out: z, then the layer's output */
	float *xhat;			    /* max_batch x out, BatchNorm layers only */
	float *invstd;			    /* out, BatchNorm layers only */
	size_t stats_off;		    /* BatchNorm: its 2 x out in a capture */
};

struct model_config {
	int ndims;			/* number of sizes in dims: layers + 1 */
	int dims[MODEL_MAX_LAYERS + 1]; /* input, hidden..., classes */
	bool batchnorm;
	bool sync_bn;
	float bn_eps;	   /* 1e-5 like torch */
	float bn_momentum; /* 0.1 like torch */
	int max_batch;	   /* largest rows passed to forward */
};

struct model {
	const struct kernel_ops *ops;
	struct kernel_ctx *kctx;
	struct model_config cfg;
	struct model_comm comm;
	int nlayers;
	struct model_layer layers[MODEL_MAX_LAYERS];
	int ntensors;
	struct model_tensor *tensors;
	size_t nparams, nbuffers; /* floats */
	float *params, *grads, *buffers;
	float *dscratch[2]; /* max_batch x widest, backward ping-pong */
	float *stats;	    /* 2 x widest: BatchNorm (d)statistics */
	float *loss_out;    /* device float[2] from xent */
	/* Ghost batches: when not NULL, a training forward copies each
	 * BatchNorm layer's batch sums (bn_stats: sum x, sum x^2) to this host
	 * array at the layer's stats_off and leaves the running statistics
	 * alone (model_bn_update_running applies them later). */
	float *bn_capture;
	size_t bn_stats_len; /* floats of a capture: 2 x out per BatchNorm layer */
};

/* Builds the model, allocates every tensor through ops and initialises the
 * parameters as torch does (Linear: U(-1/sqrt(in), 1/sqrt(in)) for weight
 * and bias; BatchNorm: weight 1, bias 0, running mean 0, running var 1) from
 * `seed`. comm may be NULL. Returns 0, -EINVAL (bad config), -ENOMEM/-EIO. */
int model_init(struct model *m, const struct kernel_ops *ops, struct kernel_ctx *kctx,
	       const struct model_config *cfg, const struct model_comm *comm, uint64_t seed);
void model_release(struct model *m);

/* What model_init would allocate through ops for cfg, in bytes (parameters,
 * gradients, buffers, activations and scratch), without allocating;
 * *nparams (if not NULL) receives the parameter count. Pure. */
size_t model_memory_bytes(const struct model_config *cfg, size_t *nparams);

/* Device pointer of tensor i's values (params or buffers). */
float *model_tensor_data(const struct model *m, int i);
/* Device pointer of tensor i's gradient, NULL for a buffer. */
float *model_tensor_grad(const struct model *m, int i);

/* Forward pass on rows samples x (device, rows x dims[0]); train: batch
 * statistics (and running-statistics update), else running statistics.
 * *logits (device, rows x classes) stays valid until the next forward. */
int model_forward(struct model *m, const float *x, int rows, bool train, const float **logits);

/* Loss of the last forward: out (host) [0] = summed cross-entropy, [1] =
 * correct predictions. With backward true, also runs the backward pass for
 * the mean loss over `rows` (gradients overwritten, not accumulated) and
 * calls comm.grad_ready per tensor, last layer first. x must be the input of
 * the last forward. */
int model_loss_backward(struct model *m, const float *x, const int32_t *labels, int rows,
			bool backward, float out[2]);

/* Updates every BatchNorm layer's running statistics as a training forward
 * over `count` rows with batch sums `stats` (a host capture, see bn_capture)
 * would: running = (1 - momentum) * running + momentum * batch value. */
int model_bn_update_running(struct model *m, const float *stats, double count);

#endif
