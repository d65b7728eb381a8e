// The parts of ECharts Tally's views draw with: bar, pie, treemap, heatmap and sankey charts,
// rendered to SVG (crisp at any zoom, and the browser tests can read what was drawn).
import * as echarts from 'echarts/core';
import { BarChart, PieChart, TreemapChart, HeatmapChart, SankeyChart } from 'echarts/charts';
import {
  GridComponent,
  TooltipComponent,
  LegendComponent,
  VisualMapComponent,
  TitleComponent,
  DatasetComponent,
  AriaComponent,
} from 'echarts/components';
import { SVGRenderer } from 'echarts/renderers';

echarts.use([
  BarChart, PieChart, TreemapChart, HeatmapChart, SankeyChart,
  GridComponent, TooltipComponent, LegendComponent, VisualMapComponent, TitleComponent,
  DatasetComponent, AriaComponent, SVGRenderer,
]);
window.echarts = echarts;
