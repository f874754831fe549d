/* big_graph.js's layout, off the page's thread: {nodes, edges} in, graph_layout.js's {x, y, width, height} out. */
import { layered } from "./graph_layout.js";

self.onmessage = (e) => {
  const { x, y, width, height } = layered(e.data.nodes, e.data.edges);
  self.postMessage({ x, y, width, height }, [x.buffer, y.buffer]);
};
