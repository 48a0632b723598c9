"""PNG figures of results: classification map beside ground truth, confusion matrix,
and a full-resolution map (one image pixel per scene pixel) with its legend.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot, no global
backend switch), so this works on headless machines and does not disturb
other plotting in the same process.
"""

import colorsys
import io

import numpy as np
from matplotlib import colormaps
from matplotlib import image as mpimage
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

UNLABELLED_COLOR = (0, 0, 0)
LEGEND_ROW = 18          # pixels per legend line of a full-resolution map
LEGEND_BACKGROUND = 255
# Fixed, well separated colours for classes 1..16 (the usual maximum for the
# benchmark scenes); classes beyond take matplotlib's tab20 but its greys (class 16 is
# grey), then colours of a golden-angle walk round the hue circle, each unlike any before.
CLASS_COLORS = (
    (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255), (255, 0, 255),
    (176, 48, 96), (46, 139, 87), (160, 32, 240), (255, 127, 80), (127, 255, 212),
    (218, 112, 214), (160, 82, 45), (128, 128, 0), (216, 191, 216), (128, 128, 128),
)


def class_colors(n_classes):
    """RGB colours (uint8 [n_classes + 1, 3]); row 0 is unlabelled, row k is class k; no
    two rows alike, for any number of classes (up to 2**24 - 1)."""
    tab20 = [tuple(int(255 * c) for c in colormaps["tab20"](i)[:3]) for i in range(20)]
    colors = [UNLABELLED_COLOR, *CLASS_COLORS, *(c for c in tab20 if len(set(c)) > 1)]
    taken = set(colors)
    walk = 0
    while len(colors) < n_classes + 1:
        # the golden angle round the hue circle, saturation and brightness by a second
        # golden walk; every uint8 colour not yet taken once those repeat
        hue, shade = (walk * 0.381966) % 1.0, (walk * 0.618034) % 1.0
        color = (tuple(int(255 * c) for c in colorsys.hsv_to_rgb(hue, 0.45 + 0.5 * shade,
                                                               0.55 + 0.45 * shade))
                 if walk < 8 * (n_classes + 1) else
                 ((walk >> 16) & 255, (walk >> 8) & 255, walk & 255))
        if color not in taken:
            colors.append(color)
            taken.add(color)
        walk += 1
    return np.asarray(colors[:n_classes + 1], dtype=np.uint8)


def label_map_to_rgb(label_map, n_classes):
    """Colours a label map (0 = unlabelled, 1..K) as a uint8 RGB image [H, W, 3]."""
    label_map = np.asarray(label_map)
    if label_map.size and (label_map.min() < 0 or label_map.max() > n_classes):
        raise ValueError(f"label map holds labels in [{label_map.min()}, {label_map.max()}], "
                         f"allowed: 0..{n_classes}")
    return class_colors(n_classes)[label_map]


def save_classification_map(path, prediction, ground_truth, class_names, title=None, dpi=100):
    """Writes a PNG: ground truth (left), predicted map (right), and a legend of class names.

    Args:
      path: output ``.png`` path.
      prediction: predicted labels [H, W], 1..K (0 where nothing was predicted).
      ground_truth: true labels [H, W], 0 = unlabelled.
      class_names: names of classes 1..K.
    """
    prediction, ground_truth = np.asarray(prediction), np.asarray(ground_truth)
    if prediction.shape != ground_truth.shape:
        raise ValueError(f"prediction shape {prediction.shape} does not match ground truth "
                         f"shape {ground_truth.shape}")
    n_classes = len(class_names)
    colors = class_colors(n_classes)
    height, width = ground_truth.shape
    panel_inches = 4.0 * max(width / height, 0.5)
    figure = Figure(figsize=(2 * panel_inches + 3.0, 4.4))
    for position, (image, caption) in enumerate(
            ((ground_truth, "Ground truth"), (prediction, "Prediction")), start=1):
        axes = figure.add_subplot(1, 2, position)
        axes.imshow(label_map_to_rgb(image, n_classes), interpolation="nearest")
        axes.set_title(caption)
        axes.set_axis_off()
    handles = [Patch(facecolor=colors[k] / 255.0, edgecolor="black", label=f"{k}: {name}")
               for k, name in enumerate(class_names, start=1)]
    figure.legend(handles=handles, loc="center right", fontsize="small", frameon=False)
    figure.subplots_adjust(right=2 * panel_inches / (2 * panel_inches + 3.0))
    if title:
        figure.suptitle(title)
    _save(figure, path, dpi)


def save_confusion_matrix_plot(path, confusion, class_names, normalize=True, dpi=100):
    """Writes a PNG heat map of a confusion matrix (rows true, columns predicted).

    With ``normalize`` each row is divided by its total, so cells read as the
    share of a true class predicted as each class; counts are printed in cells.
    """
    confusion = np.asarray(confusion)
    n_classes = len(class_names)
    if confusion.shape != (n_classes, n_classes):
        raise ValueError(f"confusion matrix shape {confusion.shape} does not match "
                         f"{n_classes} class names")
    shown = confusion.astype(np.float64)
    if normalize:
        shown /= np.maximum(shown.sum(axis=1, keepdims=True), 1)
    size = 2.0 + 0.45 * n_classes
    figure = Figure(figsize=(size + 1.5, size))
    axes = figure.add_subplot(1, 1, 1)
    image = axes.imshow(shown, cmap="Blues", interpolation="nearest")
    figure.colorbar(image, ax=axes, fraction=0.046)
    ticks = np.arange(n_classes)
    axes.set_xticks(ticks, labels=class_names, rotation=90, fontsize="small")
    axes.set_yticks(ticks, labels=class_names, fontsize="small")
    axes.set_xlabel("Predicted class")
    axes.set_ylabel("True class")
    threshold = shown.max() / 2 if shown.size else 0
    for (row, col), count in np.ndenumerate(confusion):
        axes.text(col, row, str(count), ha="center", va="center", fontsize="x-small",
                  color="white" if shown[row, col] > threshold else "black")
    figure.tight_layout()
    _save(figure, path, dpi)


def _save(figure, path, dpi):
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=dpi, format="png")


def map_with_legend(label_map, class_names):
    """A label map at full resolution with its legend to the right, uint8 RGB.

    Pixel ``[r, c]`` of the map (0 = no class, 1..K) is the colour of its class at
    ``[r, c]`` of the image (rows ``0..H-1``, columns ``0..W-1``); the legend (a
    colour swatch and ``k: name`` per class, on white) starts at column ``W``.
    The image is ``max(H, legend height)`` rows high.
    """
    rgb = label_map_to_rgb(label_map, len(class_names))
    legend = _legend(class_names)
    height = max(rgb.shape[0], legend.shape[0])
    image = np.full((height, rgb.shape[1] + legend.shape[1], 3), LEGEND_BACKGROUND, np.uint8)
    image[:rgb.shape[0], :rgb.shape[1]] = rgb
    image[:legend.shape[0], rgb.shape[1]:] = legend
    return image


def _legend(class_names):
    """Swatches and ``k: name`` lines, uint8 RGB [rows * LEGEND_ROW, width, 3]."""
    lines = ["%d: %s" % (k, name) for k, name in enumerate(class_names, start=1)]
    height = LEGEND_ROW * len(lines) + LEGEND_ROW // 2
    width = 2 * LEGEND_ROW + 7 * max(len(line) for line in lines)
    dpi = 100
    figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(figure)
    for row, line in enumerate(lines):
        figure.text(1.5 * LEGEND_ROW / width, 1 - ((row + 1) * LEGEND_ROW - 3) / height, line,
                    fontsize=8, verticalalignment="baseline")
    canvas.draw()
    legend = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    for row, color in enumerate(class_colors(len(lines))[1:]):   # swatches in exact colours
        legend[row * LEGEND_ROW + 4:(row + 1) * LEGEND_ROW - 2, 4:LEGEND_ROW - 2] = color
    return legend


def png_bytes(rgb):
    """The PNG encoding of a uint8 RGB image, pixel for pixel."""
    buffer = io.BytesIO()
    mpimage.imsave(buffer, rgb, format="png")
    return buffer.getvalue()
