// eqx_fmnist's page engine: the model's forward pass, the trust flag, its backward pass
// (integrated gradients, as ef.explain), and a photo's preparation as `eqx-fmnist
// predict` does it (Pillow's integer arithmetic, step by step).
// Plain JavaScript with no dependencies: it runs in a browser from file:// and in node.
(function (root) {
  "use strict";

  // ----------------------------------------------------------------- the model

  function decodeFloats(base64) {
    let bytes;
    if (typeof Buffer !== "undefined") {
      bytes = Uint8Array.from(Buffer.from(base64, "base64"));
    } else {
      const text = atob(base64);
      bytes = new Uint8Array(text.length);
      for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    }
    return new Float32Array(bytes.buffer); // little-endian, as every browser is
  }

  // The page's embedded JSON (as eqx_fmnist.export writes it) as typed arrays.
  function loadModel(spec) {
    const sizes = spec.sizes;
    const members = spec.members.map(function (m) {
      return {
        layers: m.layers.map(function (l, i) {
          return { weight: decodeFloats(l.weight), bias: decodeFloats(l.bias),
                   in: sizes[i], out: sizes[i + 1] };
        }),
        whiten: m.whiten ? decodeFloats(m.whiten) : null,
        centres: m.centres ? decodeFloats(m.centres) : null,
      };
    });
    return { sizes: sizes, members: members, ensemble: spec.ensemble,
             temperature: spec.temperature, trust: spec.trust, classNames: spec.class_names,
             sets: spec.sets || null, views: spec.views || null };
  }

  function gelu(x) { // tanh form, as jax.nn.gelu
    return 0.5 * x * (1 + Math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  }

  function logSoftmax(z) {
    const top = Math.max.apply(null, z);
    let total = 0;
    for (let j = 0; j < z.length; j++) total += Math.exp(z[j] - top);
    const log = top + Math.log(total);
    return z.map(function (v) { return v - log; });
  }

  // One member's pre-activations at `x` (the last layer's are the logits).
  function tape(member, x) {
    const pre = [];
    let h = x;
    member.layers.forEach(function (layer, i) {
      const s = new Float64Array(layer.out);
      for (let j = 0; j < layer.out; j++) {
        let v = layer.bias[j];
        const row = j * layer.in;
        for (let k = 0; k < layer.in; k++) v += layer.weight[row + k] * h[k];
        s[j] = v;
      }
      pre.push(s);
      h = i < member.layers.length - 1 ? s.map(gelu) : s;
    });
    return pre;
  }

  // One member: its logits and its hidden activations side by side.
  function forwardMember(member, x) {
    const pre = tape(member, x), hidden = [];
    for (let i = 0; i < pre.length - 1; i++) pre[i].forEach(function (v) { hidden.push(gelu(v)); });
    return { logits: Array.from(pre[pre.length - 1]), features: hidden };
  }

  // The smallest squared distance of the whitened activations to a class centre.
  function memberScore(member, features) {
    const n = features.length, classes = member.centres.length / n;
    const white = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const f = features[i];
      if (f === 0) continue;
      const row = i * n;
      for (let j = 0; j < n; j++) white[j] += f * member.whiten[row + j];
    }
    let best = Infinity;
    for (let c = 0; c < classes; c++) {
      let d = 0;
      for (let j = 0; j < n; j++) { const e = white[j] - member.centres[c * n + j]; d += e * e; }
      best = Math.min(best, d);
    }
    return best;
  }

  // The log of the mean of softmax(z) over the rows of `rows`.
  function logMeanProb(rows) {
    const logp = rows.map(logSoftmax);
    return logp[0].map(function (_, j) {
      const column = logp.map(function (l) { return l[j]; });
      const top = Math.max.apply(null, column);
      let total = 0;
      column.forEach(function (v) { total += Math.exp(v - top); });
      return top + Math.log(total / column.length);
    });
  }

  // Test-time augmentation: each view's pixel i is pixel table[i] of the image, or 0
  // where table[i] is 784 (a pixel the move uncovers).
  function view(x, table) {
    const out = new Float64Array(table.length);
    for (let i = 0; i < table.length; i++) out[i] = table[i] < x.length ? x[table[i]] : 0;
    return out;
  }

  // `pixels`: 784 values 0-255 (light item on dark). Returns the page's answer.
  function classify(model, pixels) {
    const x = new Float64Array(pixels.length);
    for (let i = 0; i < pixels.length; i++) x[i] = pixels[i] / 255;
    const each = model.members.map(function (m) {
      const plain = forwardMember(m, x);
      if (!model.views) return plain;
      const views = model.views.map(function (t) { return forwardMember(m, view(x, t)).logits; });
      return { logits: logMeanProb(views), features: plain.features }; // trust: the image
    });
    let logits;
    if (model.ensemble) { // the log of the mean of the members' probabilities
      logits = logMeanProb(each.map(function (e) { return e.logits; }));
    } else {
      logits = each[0].logits;
    }
    const scaled = logSoftmax(logits.map(function (v) { return v / model.temperature; }));
    const probabilities = scaled.map(Math.exp);
    let best = 0;
    for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j;
    const answer = { class: model.classNames[best], index: best, logits: logits,
                     probabilities: probabilities, trust_score: null, unusual: null, set: null };
    if (model.sets) { // conformal: class k when 1 - p_k <= its threshold, or the top class
      const top = probabilities.indexOf(Math.max.apply(null, probabilities));
      answer.set = probabilities.map(function (p, k) {
        return 1 - p <= model.sets.thresholds[k] || k === top;
      });
    }
    if (model.trust) {
      const t = model.trust;
      let score = 0;
      model.members.forEach(function (m, k) { score += memberScore(m, each[k].features); });
      score /= model.members.length;
      let sum = 0;
      for (let i = 0; i < pixels.length; i++) sum += pixels[i];
      const mean = sum / pixels.length / 255;
      let variance = 0;
      for (let i = 0; i < pixels.length; i++) { const e = x[i] - mean; variance += e * e; }
      const contrast = Math.sqrt(variance / pixels.length);
      answer.trust_score = score;
      answer.unusual = sum < t.ink_sum_range[0] || sum > t.ink_sum_range[1] ||
        contrast < t.min_contrast || score > t.threshold;
    }
    return answer;
  }

  // ----------------------------------------------------------------- attributions

  function geluGrad(s) { // d gelu / ds of the tanh form
    const c = 0.7978845608028654, t = Math.tanh(c * (s + 0.044715 * s * s * s));
    return 0.5 * (1 + t) + 0.5 * s * (1 - t * t) * c * (1 + 3 * 0.044715 * s * s);
  }

  // The backward pass: the gradient with respect to the input of sum_j dz[j] * logit_j.
  function backward(member, pre, dz) {
    let g = Float64Array.from(dz);
    for (let i = member.layers.length - 1; i >= 0; i--) {
      const layer = member.layers[i];
      if (i < member.layers.length - 1) for (let j = 0; j < g.length; j++) g[j] *= geluGrad(pre[i][j]);
      const back = new Float64Array(layer.in);
      for (let j = 0; j < layer.out; j++) {
        if (g[j] === 0) continue;
        const row = j * layer.in;
        for (let k = 0; k < layer.in; k++) back[k] += layer.weight[row + k] * g[j];
      }
      g = back;
    }
    return g;
  }

  // Class `target`'s score at `x` and its gradient: one model's logit, or an
  // ensemble's log mean probability (d/dz_mj = share_m * (1[j = target] - p_mj), where
  // share_m is member m's part of the mean probability of the class).
  function scoreAndGradient(model, x, target) {
    const pres = model.members.map(function (m) { return tape(m, x); });
    const logits = pres.map(function (p) { return Array.from(p[p.length - 1]); });
    let score, dzs;
    if (!model.ensemble) {
      score = logits[0][target];
      dzs = [logits[0].map(function (_, j) { return j === target ? 1 : 0; })];
    } else {
      score = logMeanProb(logits)[target];
      const probs = logits.map(function (z) { return logSoftmax(z).map(Math.exp); });
      let total = 0;
      probs.forEach(function (p) { total += p[target]; });
      dzs = probs.map(function (p) {
        return p.map(function (v, j) { return (p[target] / total) * ((j === target ? 1 : 0) - v); });
      });
    }
    const grad = new Float64Array(x.length);
    model.members.forEach(function (m, k) {
      const g = backward(m, pres[k], dzs[k]);
      for (let i = 0; i < grad.length; i++) grad[i] += g[i];
    });
    return { score: score, grad: grad };
  }

  // Integrated gradients of class `target` against the blank image, as ef.explain
  // computes them: x * the mean gradient at the midpoints alpha = (s + 0.5) / steps.
  function explain(model, pixels, target, steps) {
    steps = steps || 64;
    const x = new Float64Array(pixels.length);
    for (let i = 0; i < pixels.length; i++) x[i] = pixels[i] / 255;
    const total = new Float64Array(x.length), point = new Float64Array(x.length);
    for (let s = 0; s < steps; s++) {
      const alpha = (s + 0.5) / steps;
      for (let i = 0; i < x.length; i++) point[i] = alpha * x[i];
      const g = scoreAndGradient(model, point, target).grad;
      for (let i = 0; i < x.length; i++) total[i] += g[i];
    }
    const attributions = Array.from(total, function (g, i) { return x[i] * g / steps; });
    const change = scoreAndGradient(model, x, target).score -
      scoreAndGradient(model, new Float64Array(x.length), target).score;
    return { target: target, attributions: attributions, score_change: change, steps: steps };
  }

  // ----------------------------------------------------------------- photos

  // RGBA bytes (as a canvas gives them) to 8-bit gray: transparency onto white, then
  // ITU-R 601-2 luma in Pillow's fixed point.
  function grayscale(rgba, width, height) {
    const gray = new Uint8Array(width * height);
    for (let i = 0; i < gray.length; i++) {
      const a = rgba[4 * i + 3], c = [0, 1, 2].map(function (k) {
        return Math.floor((rgba[4 * i + k] * a + 255 * (255 - a) + 127) / 255);
      });
      gray[i] = (c[0] * 19595 + c[1] * 38470 + c[2] * 7471 + 0x8000) >> 16;
    }
    return gray;
  }

  // Pillow's Image.reduce(factor): block means, partial blocks at the edges too.
  function reduce(gray, width, height, factor) {
    const w = Math.ceil(width / factor), h = Math.ceil(height / factor);
    const out = new Uint8Array(w * h);
    for (let y = 0; y < h; y++) {
      for (let x = 0; x < w; x++) {
        let sum = 0, count = 0;
        for (let yy = y * factor; yy < Math.min(height, (y + 1) * factor); yy++) {
          for (let xx = x * factor; xx < Math.min(width, (x + 1) * factor); xx++) {
            sum += gray[yy * width + xx]; count++;
          }
        }
        const multiplier = Math.trunc(Math.fround(4294967296 / Math.fround(256 * count)));
        out[y * w + x] = Math.floor((sum + (count >> 1)) * multiplier / 16777216);
      }
    }
    return { pixels: out, width: w, height: h };
  }

  const TRIM_TOLERANCE = 24;

  // The box (left, top, right, bottom) of what differs from the corner colour, judged
  // on a copy averaged down to at most 256 pixels a side.
  function trimBox(gray, width, height, background) {
    const factor = Math.max(1, Math.ceil(Math.max(width, height) / 256));
    const small = factor > 1 ? reduce(gray, width, height, factor)
      : { pixels: gray, width: width, height: height };
    let top = Infinity, left = Infinity, bottom = -1, right = -1;
    for (let y = 0; y < small.height; y++) {
      for (let x = 0; x < small.width; x++) {
        if (Math.abs(small.pixels[y * small.width + x] - background) > TRIM_TOLERANCE) {
          top = Math.min(top, y); bottom = Math.max(bottom, y);
          left = Math.min(left, x); right = Math.max(right, x);
        }
      }
    }
    if (bottom < 0) return [0, 0, width, height];
    return [left * factor, top * factor, Math.min(width, (right + 1) * factor),
            Math.min(height, (bottom + 1) * factor)];
  }

  function sinc(x) { if (x === 0) return 1; x *= Math.PI; return Math.sin(x) / x; }
  function lanczos(x) { return -3 <= x && x < 3 ? sinc(x) * sinc(x / 3) : 0; }

  const PRECISION_BITS = 22; // Pillow's 8-bit resampling: 32 - 8 - 2

  // Pillow's coefficients for one axis: for each output pixel, the first input pixel
  // and the fixed-point weights of the Lanczos-3 filter stretched over the scale.
  function coefficients(inSize, outSize) {
    const scale = inSize / outSize, filterScale = Math.max(scale, 1);
    const support = 3 * filterScale, ss = 1.0 / filterScale, rows = [];
    for (let xx = 0; xx < outSize; xx++) {
      const centre = (xx + 0.5) * scale;
      const xmin = Math.max(0, Math.trunc(centre - support + 0.5));
      const xmax = Math.min(inSize, Math.trunc(centre + support + 0.5)) - xmin;
      const k = [];
      let total = 0;
      for (let x = 0; x < xmax; x++) {
        const w = lanczos((x + xmin - centre + 0.5) * ss);
        k.push(w); total += w;
      }
      rows.push({ start: xmin, weights: k.map(function (w) {
        const v = (total !== 0 ? w / total : w) * (1 << PRECISION_BITS);
        return v < 0 ? Math.trunc(-0.5 + v) : Math.trunc(0.5 + v);
      }) });
    }
    return rows;
  }

  function clip8(sum) { return Math.min(255, Math.max(0, sum >> PRECISION_BITS)); }

  function resampleRows(pixels, width, height, outWidth) { // horizontal, to 8 bits
    const cs = coefficients(width, outWidth), out = new Uint8Array(outWidth * height);
    for (let y = 0; y < height; y++) {
      for (let xx = 0; xx < outWidth; xx++) {
        let s = 1 << (PRECISION_BITS - 1);
        const c = cs[xx];
        for (let x = 0; x < c.weights.length; x++) s += pixels[y * width + c.start + x] * c.weights[x];
        out[y * outWidth + xx] = clip8(s);
      }
    }
    return out;
  }

  function resampleColumns(pixels, width, height, outHeight) { // vertical, to 8 bits
    const cs = coefficients(height, outHeight), out = new Uint8Array(width * outHeight);
    for (let yy = 0; yy < outHeight; yy++) {
      const c = cs[yy];
      for (let x = 0; x < width; x++) {
        let s = 1 << (PRECISION_BITS - 1);
        for (let y = 0; y < c.weights.length; y++) s += pixels[(c.start + y) * width + x] * c.weights[y];
        out[yy * width + x] = clip8(s);
      }
    }
    return out;
  }

  // Image.resize((w, h), LANCZOS): one pass per axis whose size changes, each rounded to
  // 8 bits. Pillow 13 runs the vertical pass first when it shrinks an image more than
  // twice as tall as it is wide (measured on 250 sizes: that order reproduces it exactly).
  function resize(gray, width, height, outWidth, outHeight) {
    let pixels = gray;
    const horizontal = outWidth !== width, vertical = outHeight !== height;
    if (vertical && horizontal && height > 2 * width && outHeight < height) {
      pixels = resampleColumns(pixels, width, height, outHeight);
      return resampleRows(pixels, width, outHeight, outWidth);
    }
    if (horizontal) pixels = resampleRows(pixels, width, height, outWidth);
    if (vertical) pixels = resampleColumns(pixels, outWidth, height, outHeight);
    return pixels;
  }

  // Pillow's Gaussian blur of radius 1: three box blurs per axis whose (fractional)
  // radius comes from Gwosdek et al. (2011), computed in float32 as Pillow does.
  function boxRadius(radius, passes) {
    const f = Math.fround;
    const sigma2 = f(f(radius * radius) / passes);
    const L = f(Math.sqrt(12.0 * sigma2 + 1.0));
    const l = f(Math.floor((L - 1.0) / 2.0));
    let a = f(f(f(2 * l) + 1) * f(f(l * f(l + 1)) - f(3 * sigma2)));
    a = f(a / f(6 * f(sigma2 - f(f(l + 1) * f(l + 1)))));
    return f(l + a);
  }

  function boxBlurLine(line, floatRadius) {
    const f = Math.fround, r = Math.trunc(floatRadius), n = line.length;
    const ww = Math.trunc(f(16777216 / f(f(floatRadius * 2) + 1)));
    const fw = Math.floor((16777216 - (2 * r + 1) * ww) / 2);
    const at = function (i) { return line[Math.min(n - 1, Math.max(0, i))]; };
    const out = new Uint8Array(n);
    for (let x = 0; x < n; x++) {
      let acc = 0;
      for (let j = -r; j <= r; j++) acc += at(x + j);
      const bulk = acc * ww + (at(x - r - 1) + at(x + r + 1)) * fw;
      out[x] = Math.floor((bulk + 8388608) / 16777216);
    }
    return out;
  }

  // ImageFilter.UnsharpMask(radius=1, percent=100, threshold=0).
  function unsharp(gray, width, height) {
    const radius = boxRadius(1.0, 3);
    let blurred = Uint8Array.from(gray);
    for (let y = 0; y < height; y++) {
      let line = blurred.slice(y * width, (y + 1) * width);
      for (let p = 0; p < 3; p++) line = boxBlurLine(line, radius);
      blurred.set(line, y * width);
    }
    for (let x = 0; x < width; x++) {
      let column = new Uint8Array(height);
      for (let y = 0; y < height; y++) column[y] = blurred[y * width + x];
      for (let p = 0; p < 3; p++) column = boxBlurLine(column, radius);
      for (let y = 0; y < height; y++) blurred[y * width + x] = column[y];
    }
    const out = new Uint8Array(gray.length);
    for (let i = 0; i < gray.length; i++) {
      out[i] = Math.min(255, Math.max(0, 2 * gray[i] - blurred[i]));
    }
    return out;
  }

  function roundHalfEven(v) { // Python's round()
    const r = Math.round(v);
    return Math.abs(v % 1) === 0.5 ? 2 * Math.round(v / 2) : r;
  }

  // eqx_fmnist.data.prepare_image on decoded RGBA bytes: trim, longest edge to 28,
  // sharpen, centre on the corner colour, negate when the background is light.
  function prepare(rgba, width, height, invert) {
    if (!width || !height) throw new Error("the image is empty (" + width + " x " + height + ")");
    const gray = grayscale(rgba, width, height);
    const corners = [gray[0], gray[width - 1], gray[(height - 1) * width],
                     gray[height * width - 1]].sort(function (a, b) { return a - b; });
    const background = Math.trunc((corners[1] + corners[2]) / 2);
    const box = trimBox(gray, width, height, background);
    const w = box[2] - box[0], h = box[3] - box[1];
    let item = new Uint8Array(w * h);
    for (let y = 0; y < h; y++) item.set(gray.subarray((box[1] + y) * width + box[0], (box[1] + y) * width + box[2]), y * w);
    const scale = 28 / Math.max(w, h);
    const sw = Math.max(1, roundHalfEven(w * scale)), sh = Math.max(1, roundHalfEven(h * scale));
    item = unsharp(resize(item, w, h, sw, sh), sw, sh);
    const pixels = new Uint8Array(784).fill(background);
    const ox = Math.floor((28 - sw) / 2), oy = Math.floor((28 - sh) / 2);
    for (let y = 0; y < sh; y++) for (let x = 0; x < sw; x++) pixels[(oy + y) * 28 + ox + x] = item[y * sw + x];
    const inverted = invert === null || invert === undefined ? background > 127 : !!invert;
    if (inverted) for (let i = 0; i < 784; i++) pixels[i] = 255 - pixels[i];
    return { pixels: pixels, inverted: inverted, background: background, box: box };
  }

  const api = { loadModel: loadModel, classify: classify, prepare: prepare, explain: explain,
                grayscale: grayscale, resize: resize, unsharp: unsharp, reduce: reduce };
  root.EqxFmnist = api;
  if (typeof module !== "undefined" && module.exports) module.exports = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
