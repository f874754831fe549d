/* big_graph.js's layouts, off the page's thread: {id, nodes, edges} in, graph_layout.js's {x, y, width, height} out with the id. */
import { layered } from "./graph_layout.js";

self.onmessage = (e) => {
  const { x, y, width, height } = layered(e.data.nodes, e.data.edges);
  self.postMessage({ id: e.data.id, x, y, width, height }, [x.buffer, y.buffer]);
};
