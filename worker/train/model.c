/*
 * model.c - the MLP's construction, forward and backward passes.
 */
#include "model.h"

#include "rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Adds a tensor to the table (sizes only; offsets are assigned in order). */
static int model_add_tensor(struct model *m, const char *name, int d0, int d1, bool is_buffer,
			    bool decay)
{
	struct model_tensor *t = &m->tensors[m->ntensors];

	snprintf(t->name, sizeof(t->name), "%s", name);
	t->ndim = d1 > 0 ? 2 : 1;
	t->shape[0] = d0;
	t->shape[1] = d1 > 0 ? d1 : 0;
	t->numel = (size_t)d0 * (d1 > 0 ? d1 : 1);
	t->is_buffer = is_buffer;
	t->decay = decay;
	if (is_buffer) {
		t->offset = m->nbuffers;
		m->nbuffers += t->numel;
	} else {
		t->offset = m->nparams;
		m->nparams += t->numel;
	}
	return m->ntensors++;
}

/* Lays out the tensor table; module index follows nn.Sequential numbering. */
static void model_plan(struct model *m)
{
	char name[MODEL_NAME_MAX];
	int module = 0;

	for (int l = 0; l < m->nlayers; l++) {
		struct model_layer *ly = &m->layers[l];

		ly->in = m->cfg.dims[l];
		ly->out = m->cfg.dims[l + 1];
		ly->hidden = l + 1 < m->nlayers;
		ly->gamma = ly->beta = ly->rmean = ly->rvar = -1;
		snprintf(name, sizeof(name), "%d.weight", module);
		ly->w = model_add_tensor(m, name, ly->out, ly->in, false, true);
		snprintf(name, sizeof(name), "%d.bias", module);
		ly->b = model_add_tensor(m, name, ly->out, 0, false, false);
		module++;
		if (ly->hidden && m->cfg.batchnorm) {
			snprintf(name, sizeof(name), "%d.weight", module);
			ly->gamma = model_add_tensor(m, name, ly->out, 0, false, false);
			snprintf(name, sizeof(name), "%d.bias", module);
			ly->beta = model_add_tensor(m, name, ly->out, 0, false, false);
			snprintf(name, sizeof(name), "%d.running_mean", module);
			ly->rmean = model_add_tensor(m, name, ly->out, 0, true, false);
			snprintf(name, sizeof(name), "%d.running_var", module);
			ly->rvar = model_add_tensor(m, name, ly->out, 0, true, false);
			ly->stats_off = m->bn_stats_len;
			m->bn_stats_len += 2 * (size_t)ly->out;
			module++;
		}
		if (ly->hidden)
			module++; /* ReLU */
	}
}

float *model_tensor_data(const struct model *m, int i)
{
	const struct model_tensor *t = &m->tensors[i];

	return (t->is_buffer ? m->buffers : m->params) + t->offset;
}

float *model_tensor_grad(const struct model *m, int i)
{
	const struct model_tensor *t = &m->tensors[i];

	return t->is_buffer ? NULL : m->grads + t->offset;
}

/* Host-side initial values of every tensor, then one copy to the device. */
static int model_init_values(struct model *m, uint64_t seed)
{
	float *hp = calloc(m->nparams ? m->nparams : 1, sizeof(float));
	float *hb = calloc(m->nbuffers ? m->nbuffers : 1, sizeof(float));
	struct rng rng;
	int ret = -ENOMEM;

	if (!hp || !hb)
		goto out;
	rng_seed(&rng, seed);
	for (int l = 0; l < m->nlayers; l++) {
		const struct model_layer *ly = &m->layers[l];
		float bound = 1.0f / sqrtf((float)ly->in);
		const struct model_tensor *w = &m->tensors[ly->w], *b = &m->tensors[ly->b];

		for (size_t i = 0; i < w->numel; i++)
			hp[w->offset + i] = (2.0f * rng_uniform(&rng) - 1.0f) * bound;
		for (size_t i = 0; i < b->numel; i++)
			hp[b->offset + i] = (2.0f * rng_uniform(&rng) - 1.0f) * bound;
		if (ly->gamma < 0)
			continue;
		for (int i = 0; i < ly->out; i++) {
			hp[m->tensors[ly->gamma].offset + i] = 1.0f;
			hb[m->tensors[ly->rvar].offset + i] = 1.0f;
		}
	}
	ret = m->ops->copy_h2d(m->kctx, m->params, hp, m->nparams * sizeof(float));
	if (ret == 0)
		ret = m->ops->copy_h2d(m->kctx, m->buffers, hb, m->nbuffers * sizeof(float));
out:
	free(hp);
	free(hb);
	return ret;
}

static int model_alloc(struct model *m, float **p, size_t floats)
{
	return m->ops->alloc(m->kctx, floats * sizeof(float), (void **)p);
}

static int model_alloc_grads(struct model *m)
{
	if (m->comm.grads_alloc)
		return m->comm.grads_alloc(m->comm.arg, m->nparams * sizeof(float),
					   (void **)&m->grads);
	return model_alloc(m, &m->grads, m->nparams);
}

static int model_alloc_all(struct model *m)
{
	size_t rows = (size_t)m->cfg.max_batch, widest = 0;
	int ret;

	for (int i = 0; i < m->cfg.ndims; i++)
		if ((size_t)m->cfg.dims[i] > widest)
			widest = (size_t)m->cfg.dims[i];
	ret = model_alloc(m, &m->params, m->nparams);
	ret = ret ? ret : model_alloc_grads(m);
	ret = ret ? ret : model_alloc(m, &m->buffers, m->nbuffers);
	ret = ret ? ret : model_alloc(m, &m->dscratch[0], rows * widest);
	ret = ret ? ret : model_alloc(m, &m->dscratch[1], rows * widest);
	ret = ret ? ret : model_alloc(m, &m->stats, 2 * widest);
	ret = ret ? ret : model_alloc(m, &m->loss_out, 2);
	for (int l = 0; ret == 0 && l < m->nlayers; l++) {
		struct model_layer *ly = &m->layers[l];

		ret = model_alloc(m, &ly->act, rows * ly->out);
		if (ret == 0 && ly->gamma >= 0)
			ret = model_alloc(m, &ly->xhat, rows * ly->out);
		if (ret == 0 && ly->gamma >= 0)
			ret = model_alloc(m, &ly->invstd, ly->out);
	}
	return ret;
}

size_t model_memory_bytes(const struct model_config *cfg, size_t *nparams)
{
	size_t rows = (size_t)cfg->max_batch, widest = 0, np = 0, nb = 0, floats;

	for (int i = 0; i < cfg->ndims; i++)
		if ((size_t)cfg->dims[i] > widest)
			widest = (size_t)cfg->dims[i];
	floats = 2 * rows * widest + 2 * widest + 2;
	for (int l = 0; l + 1 < cfg->ndims; l++) {
		size_t in = (size_t)cfg->dims[l], out = (size_t)cfg->dims[l + 1];
		bool bn = cfg->batchnorm && l + 2 < cfg->ndims;

		np += in * out + out + (bn ? 2 * out : 0);
		nb += bn ? 2 * out : 0;
		floats += rows * out + (bn ? rows * out + out : 0);
	}
	if (nparams)
		*nparams = np;
	return (floats + 2 * np + nb) * sizeof(float);
}

static int model_check_config(const struct model_config *cfg)
{
	if (cfg->ndims < 2 || cfg->ndims > MODEL_MAX_LAYERS + 1 || cfg->max_batch <= 0)
		return -EINVAL;
	for (int i = 0; i < cfg->ndims; i++)
		if (cfg->dims[i] <= 0)
			return -EINVAL;
	return cfg->dims[cfg->ndims - 1] >= 2 ? 0 : -EINVAL;
}

int model_init(struct model *m, const struct kernel_ops *ops, struct kernel_ctx *kctx,
	       const struct model_config *cfg, const struct model_comm *comm, uint64_t seed)
{
	int ret;

	memset(m, 0, sizeof(*m));
	ret = model_check_config(cfg);
	if (ret < 0)
		return ret;
	m->ops = ops;
	m->kctx = kctx;
	m->cfg = *cfg;
	if (comm)
		m->comm = *comm;
	if (m->comm.world < 1)
		m->comm.world = 1;
	m->nlayers = cfg->ndims - 1;
	m->tensors = calloc((size_t)m->nlayers * 6, sizeof(*m->tensors));
	if (!m->tensors)
		return -ENOMEM;
	model_plan(m);
	ret = model_alloc_all(m);
	if (ret == 0)
		ret = model_init_values(m, seed);
	if (ret < 0)
		model_release(m);
	return ret;
}

void model_release(struct model *m)
{
	if (!m->ops)
		return;
	for (int l = 0; l < m->nlayers; l++) {
		m->ops->free(m->kctx, m->layers[l].act);
		m->ops->free(m->kctx, m->layers[l].xhat);
		m->ops->free(m->kctx, m->layers[l].invstd);
	}
	m->ops->free(m->kctx, m->params);
	if (m->comm.grads_free)
		m->comm.grads_free(m->comm.arg, m->grads);
	else
		m->ops->free(m->kctx, m->grads);
	m->ops->free(m->kctx, m->buffers);
	m->ops->free(m->kctx, m->dscratch[0]);
	m->ops->free(m->kctx, m->dscratch[1]);
	m->ops->free(m->kctx, m->stats);
	m->ops->free(m->kctx, m->loss_out);
	free(m->tensors);
	memset(m, 0, sizeof(*m));
}

/* BatchNorm forward of one layer, in place on ly->act. */
static int model_bn_forward(struct model *m, struct model_layer *ly, int rows, bool train)
{
	const struct kernel_ops *k = m->ops;
	float *gamma = model_tensor_data(m, ly->gamma), *beta = model_tensor_data(m, ly->beta);
	float *rmean = model_tensor_data(m, ly->rmean), *rvar = model_tensor_data(m, ly->rvar);
	bool sync = m->cfg.sync_bn && m->comm.allreduce_sum && m->comm.world > 1;
	double count = (double)rows * (sync ? m->comm.world : 1);
	int ret;

	if (!train)
		return k->bn_infer(m->kctx, ly->act, rows, ly->out, gamma, beta, rmean, rvar,
				   m->cfg.bn_eps, ly->act);
	ret = k->bn_stats(m->kctx, ly->act, rows, ly->out, m->stats);
	if (ret == 0 && sync)
		ret = m->comm.allreduce_sum(m->comm.arg, m->stats, 2 * (size_t)ly->out);
	if (ret == 0 && m->bn_capture)
		ret = k->copy_d2h(m->kctx, m->bn_capture + ly->stats_off, m->stats,
				  2 * (size_t)ly->out * sizeof(float));
	if (ret < 0)
		return ret;
	/* torch skips the running update when the batch has one sample. */
	if (m->bn_capture || count <= 1.0)
		rmean = rvar = NULL;
	return k->bn_fwd(m->kctx, ly->act, m->stats, rows, ly->out, count, gamma, beta,
			 m->cfg.bn_eps, m->cfg.bn_momentum, rmean, rvar, ly->invstd, ly->xhat,
			 ly->act);
}

int model_bn_update_running(struct model *m, const float *stats, double count)
{
	const struct kernel_ops *k = m->ops;
	int ret = 0;

	for (int l = 0; ret == 0 && l < m->nlayers; l++) {
		struct model_layer *ly = &m->layers[l];

		if (ly->gamma < 0)
			continue;
		ret = k->copy_h2d(m->kctx, m->stats, stats + ly->stats_off,
				  2 * (size_t)ly->out * sizeof(float));
		/* One row of the (spent) activations stands in for the batch:
		 * only the running statistics are kept. */
		if (ret == 0)
			ret = k->bn_fwd(
			    m->kctx, ly->act, m->stats, 1, ly->out, count,
			    model_tensor_data(m, ly->gamma), model_tensor_data(m, ly->beta),
			    m->cfg.bn_eps, m->cfg.bn_momentum, model_tensor_data(m, ly->rmean),
			    model_tensor_data(m, ly->rvar), ly->invstd, ly->xhat, ly->act);
	}
	return ret;
}

int model_forward(struct model *m, const float *x, int rows, bool train, const float **logits)
{
	const struct kernel_ops *k = m->ops;
	const float *in = x;
	int ret = 0;

	if (rows <= 0 || rows > m->cfg.max_batch)
		return -EINVAL;
	for (int l = 0; ret == 0 && l < m->nlayers; l++) {
		struct model_layer *ly = &m->layers[l];
		bool bn = ly->gamma >= 0;

		ret = k->gemm(m->kctx, false, true, rows, ly->out, ly->in, 1.0f, in, ly->in,
			      model_tensor_data(m, ly->w), ly->in, 0.0f, ly->act, ly->out);
		if (ret == 0)
			ret = k->bias_act_fwd(m->kctx, ly->act, model_tensor_data(m, ly->b), rows,
					      ly->out, ly->hidden && !bn);
		if (ret == 0 && bn) {
			ret = model_bn_forward(m, ly, rows, train);
			if (ret == 0)
				ret = k->bias_act_fwd(m->kctx, ly->act, NULL, rows, ly->out, true);
		}
		in = ly->act;
	}
	*logits = in;
	return ret;
}

/* BatchNorm backward of one layer, in place on d (rows x out). */
static int model_bn_backward(struct model *m, struct model_layer *ly, float *d, int rows)
{
	const struct kernel_ops *k = m->ops;
	bool sync = m->cfg.sync_bn && m->comm.allreduce_sum && m->comm.world > 1;
	double count = (double)rows * (sync ? m->comm.world : 1);
	size_t bytes = (size_t)ly->out * sizeof(float);
	int ret;

	ret = k->bn_bwd_stats(m->kctx, d, ly->xhat, rows, ly->out, m->stats);
	/* dbeta = sum dy, dgamma = sum dy*xhat: the LOCAL sums, as torch's
	 * SyncBatchNorm; the reducer averages them like any gradient. */
	if (ret == 0)
		ret = k->copy_d2d(m->kctx, model_tensor_grad(m, ly->beta), m->stats, bytes);
	if (ret == 0)
		ret = k->copy_d2d(m->kctx, model_tensor_grad(m, ly->gamma), m->stats + ly->out,
				  bytes);
	if (ret == 0 && sync)
		ret = m->comm.allreduce_sum(m->comm.arg, m->stats, 2 * (size_t)ly->out);
	if (ret == 0)
		ret =
		    k->bn_bwd_dx(m->kctx, d, ly->xhat, ly->invstd, model_tensor_data(m, ly->gamma),
				 m->stats, rows, ly->out, count, d);
	return ret;
}

static int model_grad_ready(struct model *m, int index)
{
	return m->comm.grad_ready ? m->comm.grad_ready(m->comm.arg, index) : 0;
}

/* Backward of layer l given d = dLoss/d(output of layer l); writes
 * dLoss/d(input) to dprev unless l == 0. */
static int model_layer_backward(struct model *m, int l, const float *x, float *d, float *dprev,
				int rows)
{
	const struct kernel_ops *k = m->ops;
	struct model_layer *ly = &m->layers[l];
	const float *in = l == 0 ? x : m->layers[l - 1].act;
	int ret = 0;

	if (ly->hidden)
		ret = k->relu_bwd(m->kctx, d, ly->act, (size_t)rows * ly->out);
	if (ret == 0 && ly->gamma >= 0) {
		ret = model_bn_backward(m, ly, d, rows);
		if (ret == 0)
			ret = model_grad_ready(m, ly->beta);
		if (ret == 0)
			ret = model_grad_ready(m, ly->gamma);
	}
	if (ret == 0)
		ret = k->gemm(m->kctx, true, false, ly->out, ly->in, rows, 1.0f, d, ly->out, in,
			      ly->in, 0.0f, model_tensor_grad(m, ly->w), ly->in);
	if (ret == 0)
		ret = k->col_sum(m->kctx, d, rows, ly->out, model_tensor_grad(m, ly->b), false);
	if (ret == 0)
		ret = model_grad_ready(m, ly->b);
	if (ret == 0)
		ret = model_grad_ready(m, ly->w);
	if (ret == 0 && l > 0)
		ret = k->gemm(m->kctx, false, false, rows, ly->in, ly->out, 1.0f, d, ly->out,
			      model_tensor_data(m, ly->w), ly->in, 0.0f, dprev, ly->in);
	return ret;
}

int model_loss_backward(struct model *m, const float *x, const int32_t *labels, int rows,
			bool backward, float out[2])
{
	const struct kernel_ops *k = m->ops;
	const struct model_layer *last = &m->layers[m->nlayers - 1];
	float *d = backward ? m->dscratch[0] : NULL;
	int ret;

	if (rows <= 0 || rows > m->cfg.max_batch)
		return -EINVAL;
	ret = k->xent(m->kctx, last->act, labels, rows, last->out, 1.0f / (float)rows, d,
		      m->loss_out);
	for (int l = m->nlayers - 1; backward && ret == 0 && l >= 0; l--) {
		float *dprev = m->dscratch[(m->nlayers - l) % 2];

		ret = model_layer_backward(m, l, x, d, dprev, rows);
		d = dprev;
	}
	if (ret == 0)
		ret = k->copy_d2h(m->kctx, out, m->loss_out, 2 * sizeof(float));
	return ret;
}
